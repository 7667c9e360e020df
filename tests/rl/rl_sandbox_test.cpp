// The sandbox (titan/rl/sandbox.h): isolation, limits and containment, checked by
// running small Python programs and inspecting what they saw and what is left.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "titan/core/error.h"
#include "titan/rl/sandbox.h"

namespace titan::rl {
namespace {

using nlohmann::json;

// Live (not zombie) processes whose real uid is the one in r.isolation
// ("...,uid=N"); -1 if none recorded. Waits up to 2 s for SIGKILLed ones to exit.
int live_processes_of_uid(const SandboxResult& r);
int processes_of_sandbox_uid(const SandboxResult& r) {
  int n = live_processes_of_uid(r);
  for (int i = 0; i < 200 && n > 0; ++i) {
    usleep(10000);
    n = live_processes_of_uid(r);
  }
  return n;
}

int live_processes_of_uid(const SandboxResult& r) {
  const size_t at = r.isolation.find("uid=");
  if (at == std::string::npos) return -1;
  const std::string uid = r.isolation.substr(at + 4);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "status");
    std::string line;
    bool zombie = false;
    while (std::getline(in, line)) {
      if (line.rfind("State:", 0) == 0) zombie = line.find('Z') != std::string::npos;
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream ss(line.substr(4));
        std::string real;
        ss >> real;
        n += real == uid && !zombie;
        break;
      }
    }
  }
  return n;
}

SandboxResult py(const std::string& code, SandboxLimits limits = {}) {
  return run_sandboxed({"/usr/bin/python3", "-s", "-B", "prog.py"}, {{"prog.py", code}}, limits);
}

TEST(Sandbox, RunsAndCapturesOutput) {
  SandboxResult r = py("import sys\nprint('hello')\nprint('err', file=sys.stderr)\nimport os\nos.write(3, b'{\"x\":1}')\n");
  EXPECT_TRUE(r.ok()) << r.describe() << " " << r.stderr_text;
  EXPECT_EQ(r.stdout_text, "hello\n");
  EXPECT_EQ(r.stderr_text, "err\n");
  EXPECT_EQ(r.result_text, "{\"x\":1}");
  EXPECT_EQ(r.describe(), "exit code 0");
}

TEST(Sandbox, EnvironmentCwdStdinAndCleanup) {
  SandboxResult r = py(
      "import os, sys, json\n"
      "env = dict(os.environ)\n"
      "files = sorted(os.listdir('.'))\n"
      "open('scratch.txt', 'w').write('x')\n"
      "print(json.dumps({'env': env, 'cwd': os.getcwd(), 'files': files, 'stdin': sys.stdin.read(),\n"
      "  'uid': os.getuid(), 'fds': sorted(int(f) for f in os.listdir('/proc/self/fd'))}))\n");
  ASSERT_TRUE(r.ok()) << r.describe() << " " << r.stderr_text;
  const json j = json::parse(r.stdout_text);
  const std::string cwd = j["cwd"];
  EXPECT_NE(cwd.find("titan_sandbox."), std::string::npos) << cwd;
  EXPECT_EQ(j["files"], json::array({"prog.py"}));
  EXPECT_EQ(j["stdin"], "");
  std::set<std::string> keys;
  for (auto it = j["env"].begin(); it != j["env"].end(); ++it) keys.insert(it.key());
  // Python itself may add LC_CTYPE when it coerces the C locale; nothing is inherited.
  keys.erase("LC_CTYPE");
  EXPECT_EQ(keys, (std::set<std::string>{"PATH", "HOME", "TMPDIR", "LANG", "PYTHONHASHSEED", "TITAN_SANDBOX_NETNS"}));
  EXPECT_EQ(j["env"]["HOME"], cwd);
  EXPECT_EQ(j["env"]["LANG"], "C.UTF-8");
  // fds: 0-3 plus the one listdir uses.
  EXPECT_LE(j["fds"].size(), 5u) << j["fds"].dump();
  if (geteuid() == 0) {
    EXPECT_GE(j["uid"].get<int64_t>(), kSandboxUidBase);
    EXPECT_NE(r.isolation.find("uid="), std::string::npos);
  }
  EXPECT_FALSE(std::filesystem::exists(cwd)) << "the work directory was not removed";
}

TEST(Sandbox, ExitCodeAndSignals) {
  SandboxResult r = py("import sys\nsys.exit(3)\n");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.describe(), "exit code 3");
  r = py("import ctypes\nctypes.string_at(0)\n");
  EXPECT_EQ(r.signal, SIGSEGV) << r.describe();
  EXPECT_EQ(r.describe(), "killed by signal 11 (SIGSEGV)");
}

TEST(Sandbox, TimeoutKillsInfiniteLoop) {
  SandboxLimits lim;
  lim.timeout_s = 1.0;
  SandboxResult r = py("while True:\n    pass\n", lim);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(r.wall_s, 5.0);
  EXPECT_NE(r.describe().find("timed out"), std::string::npos);
}

TEST(Sandbox, CpuLimit) {
  SandboxLimits lim;
  lim.timeout_s = 60.0;  // wall: far above 1 CPU-second even on a loaded machine
  lim.cpu_s = 1;
  SandboxResult r = py("while True:\n    pass\n", lim);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.signal == SIGXCPU || r.signal == SIGKILL) << r.describe();
}

TEST(Sandbox, MemoryLimit) {
  SandboxLimits lim;
  lim.memory_bytes = int64_t{512} << 20;
  SandboxResult r = py("x = bytearray(4 << 30)\n", lim);
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_NE(r.stderr_text.find("MemoryError"), std::string::npos) << r.stderr_text;
}

TEST(Sandbox, OutputCap) {
  SandboxLimits lim;
  lim.output_bytes = 1000;
  SandboxResult r = py("import sys\nfor i in range(100000):\n    sys.stdout.write('0123456789')\n", lim);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.stdout_text.size(), 1000u);
  EXPECT_TRUE(r.stdout_truncated);
}

TEST(Sandbox, FileSizeLimit) {
  SandboxLimits lim;
  lim.file_bytes = 1 << 20;
  SandboxResult r = py("open('big', 'wb').write(b'x' * (4 << 20))\n", lim);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.stderr_text.find("File too large"), std::string::npos) << r.describe() << " " << r.stderr_text;
}

TEST(Sandbox, NetworkIsUnreachable) {
  // socket() is refused by the seccomp filter in every mode; in the network
  // namespace there is no interface but a down loopback anyway.
  for (bool ns : {true, false}) {
    SandboxLimits lim;
    lim.namespaces = ns;
    SandboxResult r = py(
        "import socket, _socket\n"
        "for make in (lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),\n"
        "             lambda: _socket.socket(_socket.AF_INET6, _socket.SOCK_DGRAM),\n"
        "             lambda: _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)):\n"
        "    try:\n"
        "        make(); print('created')\n"
        "    except OSError as e:\n"
        "        print('blocked', e.errno)\n"
        "a, b = socket.socketpair()\n"
        "a.send(b'x'); print('pair', b.recv(1))\n"
        "print(sorted(l.split(':')[0].strip() for l in open('/proc/self/net/dev').readlines()[2:]))\n",
        lim);
    ASSERT_TRUE(r.ok()) << r.describe() << r.stderr_text;
    EXPECT_NE(r.isolation.find("seccomp"), std::string::npos) << r.isolation;
    EXPECT_EQ(r.stdout_text.find("created"), std::string::npos) << r.stdout_text;
    EXPECT_EQ(r.stdout_text.rfind("blocked 1\nblocked 1\nblocked 1\npair b'x'\n", 0), 0u) << r.stdout_text;
    if (ns) {
      EXPECT_NE(r.isolation.find("netns"), std::string::npos) << r.isolation;
      EXPECT_NE(r.stdout_text.find("['lo']"), std::string::npos) << r.stdout_text;
    }
  }
}

class SandboxContainment : public ::testing::TestWithParam<bool> {};

TEST_P(SandboxContainment, ForkBombIsContained) {
  SandboxLimits lim;
  lim.namespaces = GetParam();
  lim.timeout_s = 1.5;
  lim.max_processes = 32;
  SandboxResult r = py(
      "import os, time\n"
      "while True:\n"
      "    try:\n"
      "        os.fork()\n"
      "    except OSError:\n"
      "        time.sleep(0.01)\n",
      lim);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.timed_out) << r.describe();
  if (geteuid() == 0) {
    EXPECT_EQ(processes_of_sandbox_uid(r), 0);
  }
  // Nothing of the sandbox uid survives: a new run can start processes at once.
  SandboxResult again = py("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('ok')\n");
  EXPECT_TRUE(again.ok()) << again.describe() << again.stderr_text;
  EXPECT_EQ(again.stdout_text, "ok\n");
}

TEST_P(SandboxContainment, DaemonisedChildDoesNotOutliveTheRun) {
  // A child that leaves the process group and sleeps: the run still ends promptly.
  SandboxLimits lim;
  lim.namespaces = GetParam();
  lim.timeout_s = 5.0;
  SandboxResult r = py(
      "import os, time\n"
      "if os.fork() == 0:\n"
      "    os.setsid()\n"
      "    time.sleep(30)\n"
      "    os._exit(0)\n"
      "print('parent done')\n",
      lim);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_FALSE(r.timed_out);
  EXPECT_LT(r.wall_s, 4.0);
  if (geteuid() == 0) {
    EXPECT_EQ(processes_of_sandbox_uid(r), 0) << "the setsid child survived";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, SandboxContainment, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "namespaces" : "fallback"; });

TEST(Sandbox, FallbackWithoutNamespacesStillRuns) {
  SandboxLimits lim;
  lim.namespaces = false;
  SandboxResult r = py("import os\nprint(os.environ['TITAN_SANDBOX_NETNS'])\n", lim);
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.stdout_text, "0\n");
  EXPECT_EQ(r.isolation.rfind("pgid", 0), 0u) << r.isolation;
}

TEST(Sandbox, BadArguments) {
  EXPECT_THROW(run_sandboxed({}, {}), Error);
  EXPECT_THROW(run_sandboxed({"python3"}, {}), Error);
  EXPECT_THROW(run_sandboxed({"/usr/bin/python3"}, {{"../x", ""}}), Error);
  SandboxLimits lim;
  lim.timeout_s = 0;
  EXPECT_THROW(run_sandboxed({"/usr/bin/python3"}, {}, lim), Error);
  // A missing program: reported, not thrown.
  SandboxResult r = run_sandboxed({"/nonexistent/python"}, {});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.describe().find("execve"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace titan::rl
