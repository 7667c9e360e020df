// The hostile-program battery of the sandbox (titan/rl/sandbox.h): network incl.
// unix sockets, env and /proc secrets, reading test data, writing outside the work
// dir, persistence across runs, fork x memory, a fork bomb, daemons, ptrace/kill
// of the parent, huge files, CPU loops ignoring signals. Each is blocked, or its
// effect is gone after the run, and this (hosting) process goes on: after every
// case no process of the run survives and this process has no child or zombie
// left. Run with namespaces and on the fallback path; as root, the whole battery
// runs again as an unprivileged user (user namespaces, then the fallback without
// them), where the documented limits of that path apply (sandbox.h).
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "titan/config/resolve.h"
#include "titan/rl/sandbox.h"

namespace titan::rl {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Processes whose command line contains token.
int processes_with(const std::string& token) {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_all(it->path() / "cmdline");
    for (char& ch : cmd)
      if (ch == '\0') ch = ' ';
    n += cmd.find(token) != std::string::npos;
  }
  return n;
}

// Children of this process (live or zombie), and live processes of a uid.
int children_of_me() {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string stat = read_all(it->path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream ss(stat.substr(close + 2));
    std::string state;
    long ppid = 0;
    ss >> state >> ppid;
    n += ppid == getpid();
  }
  return n;
}

int live_of_uid(uid_t uid) {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream st(read_all(it->path() / "status"));
    std::string line;
    bool zombie = false;
    while (std::getline(st, line)) {
      if (line.rfind("State:", 0) == 0) zombie = line.find('Z') != std::string::npos;
      if (line.rfind("Uid:", 0) == 0) {
        std::istringstream ss(line.substr(4));
        uid_t real = 0;
        ss >> real;
        n += real == uid && !zombie;
      }
    }
  }
  return n;
}

uid_t uid_of(const SandboxResult& r) {
  const size_t at = r.isolation.find("uid=");
  return at == std::string::npos ? 0 : static_cast<uid_t>(std::stoul(r.isolation.substr(at + 4)));
}

// Waits (up to 3 s) until nothing of the run is left; false if something is.
::testing::AssertionResult nothing_left(const SandboxResult& r, const std::string& token) {
  int kids = 0, tok = 0, uid = 0;
  for (int i = 0; i < 300; ++i) {
    kids = children_of_me();
    tok = token.empty() ? 0 : processes_with(token);
    uid = uid_of(r) != 0 ? live_of_uid(uid_of(r)) : 0;
    if (kids == 0 && tok == 0 && uid == 0) return ::testing::AssertionSuccess();
    usleep(10000);
  }
  return ::testing::AssertionFailure() << kids << " children/zombies of this process, " << tok
                                       << " processes with the token, " << uid << " processes of the sandbox uid ("
                                       << r.isolation << ")";
}

std::string token() {
  static std::mt19937_64 rng(std::random_device{}());
  return "titanhostile" + std::to_string(rng() % 1000000000);
}

SandboxResult py(const std::string& code, SandboxLimits lim, std::vector<SandboxFile> files = {}) {
  files.push_back({"prog.py", code});
  return run_sandboxed({"/usr/bin/python3", "-s", "-B", "prog.py"}, files, lim);
}

class SandboxHostile : public ::testing::TestWithParam<bool> {
 protected:
  SandboxLimits limits() const {
    SandboxLimits l;
    l.namespaces = GetParam();
    l.timeout_s = 20.0;
    return l;
  }
  // The fallback without root has no uid, mount or PID namespace of its own:
  // secrets of this user, files, and this process are reachable (sandbox.h).
  bool weak() const { return !GetParam() && geteuid() != 0; }
  bool private_root(const SandboxResult& r) const { return r.isolation.find("mntns") != std::string::npos; }
};

TEST_P(SandboxHostile, Network) {
  // A unix socket of the host that anyone may connect to.
  const std::string path = "/tmp/" + token() + ".sock";
  const int srv = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(srv, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  chmod(path.c_str(), 0777);
  ASSERT_EQ(listen(srv, 4), 0);
  const SandboxResult r = py(
      "import socket, _socket, sys\n"
      "path = sys.argv[0] and open('sock.txt').read()\n"
      "tries = [\n"
      "  lambda: socket.create_connection(('127.0.0.1', 22), timeout=2),\n"
      "  lambda: socket.create_connection(('1.1.1.1', 53), timeout=2),\n"
      "  lambda: _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM).connect(('127.0.0.1', 22)),\n"
      "  lambda: _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM).connect(path),\n"
      "  lambda: _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, 0),\n"
      "  lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b'x', path),\n"
      "]\n"
      "for t in tries:\n"
      "    try:\n"
      "        t(); print('connected')\n"
      "    except OSError as e:\n"
      "        print('blocked', e.errno)\n",
      limits(), {{"sock.txt", path}});
  EXPECT_TRUE(r.ok()) << r.describe() << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("connected"), std::string::npos) << r.stdout_text;
  EXPECT_LT(accept(srv, nullptr, nullptr), 0) << "a connection reached the host socket";
  close(srv);
  unlink(path.c_str());
  EXPECT_TRUE(nothing_left(r, ""));
}

TEST_P(SandboxHostile, EnvironmentAndProcSecrets) {
  const std::string secret = token();
  setenv("TITAN_HOSTILE_SECRET", secret.c_str(), 1);
  const SandboxResult r = py(
      "import os, glob\n"
      "s = open('secret.txt').read()\n"
      "found = [k for k, v in os.environ.items() if s in v]\n"
      "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
      "for p in pids:\n"
      "    for f in ('environ', 'cmdline'):\n"
      "        try:\n"
      "            if s.encode() in open('/proc/%s/%s' % (p, f), 'rb').read(): found.append(p + '/' + f)\n"
      "        except OSError:\n"
      "            pass\n"
      "print('found' if found else 'clean', found, len(pids))\n",
      limits(), {{"secret.txt", secret}});
  unsetenv("TITAN_HOSTILE_SECRET");
  std::printf("isolation (euid %d): %s\n", static_cast<int>(geteuid()), r.isolation.c_str());
  ASSERT_TRUE(r.ok()) << r.describe() << r.stderr_text;
  if (!weak()) EXPECT_EQ(r.stdout_text.rfind("clean", 0), 0u) << r.stdout_text;
  if (r.isolation.find("pidns") != std::string::npos) {
    // Only the sandbox's own processes: supervisor and program.
    const int visible = std::stoi(r.stdout_text.substr(r.stdout_text.rfind(' ') + 1));
    EXPECT_LE(visible, 3) << r.stdout_text;
  }
  EXPECT_TRUE(nothing_left(r, ""));
}

TEST_P(SandboxHostile, ReadingTestData) {
  // A world-readable file in the checkout and the shared data sets.
  const std::string hidden = (fs::current_path() / (token() + ".hidden")).string();
  { std::ofstream(hidden) << "expected answers\n"; }
  chmod(hidden.c_str(), 0644);
  const std::string paths = hidden + "\n" + config::shared_data_dir() + "/mbpp/mbpp.jsonl\n" +
                            fs::current_path().string() + "/README.md\n";
  const SandboxResult r = py(
      "for p in open('paths.txt').read().split():\n"
      "    try:\n"
      "        open(p).read(10); print('read', p)\n"
      "    except OSError as e:\n"
      "        print('hidden', e.errno)\n",
      limits(), {{"paths.txt", paths}});
  fs::remove(hidden);
  ASSERT_TRUE(r.ok()) << r.describe() << r.stderr_text;
  if (private_root(r)) EXPECT_EQ(r.stdout_text.find("read"), std::string::npos) << r.stdout_text;
  EXPECT_TRUE(nothing_left(r, ""));
}

TEST_P(SandboxHostile, WritingOutsideTheWorkDirAndPersistence) {
  const std::string tok = token();
  const std::vector<std::string> outside = {"/tmp/" + tok, "/var/tmp/" + tok, "/dev/shm/" + tok};
  const std::string write =
      "import os\n"
      "tok = open('tok.txt').read()\n"
      "for p in ['/tmp/' + tok, '/var/tmp/' + tok, '/dev/shm/' + tok, '../' + tok + '.up',\n"
      "          '/etc/' + tok, '/usr/' + tok, '/' + tok]:\n"
      "    try:\n"
      "        open(p, 'w').write('x'); print('wrote', p)\n"
      "    except OSError as e:\n"
      "        print('refused', p, e.errno)\n";
  const SandboxResult a = py(write, limits(), {{"tok.txt", tok}});
  ASSERT_TRUE(a.ok()) << a.describe() << a.stderr_text;
  for (const char* sys_dir : {"/etc/", "/usr/", "/"})
    EXPECT_FALSE(fs::exists(sys_dir + tok)) << sys_dir;
  if (!weak()) {
    for (const std::string& p : outside) EXPECT_FALSE(fs::exists(p)) << p << " persisted on the host";
    EXPECT_FALSE(fs::exists("/tmp/" + tok + ".up"));
  }
  // The next run sees nothing of the first.
  const SandboxResult b = py(
      "import os\ntok = open('tok.txt').read()\n"
      "print([p for p in ['/tmp/' + tok, '/var/tmp/' + tok, '/dev/shm/' + tok] if os.path.exists(p)])\n",
      limits(), {{"tok.txt", tok}});
  ASSERT_TRUE(b.ok()) << b.describe() << b.stderr_text;
  if (!weak()) EXPECT_EQ(b.stdout_text, "[]\n");
  for (const std::string& p : outside) fs::remove(p);
  fs::remove("/tmp/" + tok + ".up");
  EXPECT_TRUE(nothing_left(b, ""));
}

TEST_P(SandboxHostile, ForkTimesMemory) {
  // Six processes of 200 MiB each under a 512 MiB sandbox: at most two can hold
  // their memory at once (or the sandbox is killed), whatever RLIMIT_AS allows each.
  SandboxLimits lim = limits();
  lim.memory_bytes = int64_t{512} << 20;
  const SandboxResult r = py(
      "import os, time\n"
      "kids = []\n"
      "for i in range(6):\n"
      "    pid = os.fork()\n"
      "    if pid == 0:\n"
      "        try:\n"
      "            b = b'x' * (200 << 20)\n"
      "        except MemoryError:\n"
      "            os._exit(1)\n"
      "        time.sleep(6)\n"
      "        os._exit(0)\n"
      "    kids.append(pid)\n"
      "time.sleep(3)\n"
      "alive = sum(1 for k in kids if os.waitpid(k, os.WNOHANG) == (0, 0))\n"
      "print('alive', alive)\n",
      lim);
  if (!r.memory_exceeded) {
    ASSERT_EQ(r.stdout_text.rfind("alive ", 0), 0u) << r.describe() << r.stderr_text;
    EXPECT_LE(std::stoi(r.stdout_text.substr(6)), 2) << r.stdout_text << r.isolation;
  }
  EXPECT_TRUE(nothing_left(r, ""));
}

TEST_P(SandboxHostile, ForkBomb) {
  SandboxLimits lim = limits();
  lim.timeout_s = 2.0;
  lim.max_processes = 32;
  const SandboxResult r = py(
      "import os, time\n"
      "while True:\n"
      "    try:\n"
      "        os.fork()\n"
      "    except OSError:\n"
      "        time.sleep(0.01)\n",
      lim);
  EXPECT_TRUE(r.timed_out) << r.describe();
  EXPECT_TRUE(nothing_left(r, ""));
  const SandboxResult again = py("import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\n",
                                 limits());
  EXPECT_TRUE(again.ok()) << again.describe() << again.stderr_text;
}

TEST_P(SandboxHostile, Daemons) {
  const std::string tok = token();
  const SandboxResult r = py(
      "import os, signal\n"
      "tok = open('tok.txt').read()\n"
      "for i in range(3):\n"
      "    if os.fork() == 0:\n"
      "        os.setsid()\n"
      "        signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
      "        if os.fork() == 0:\n"
      "            os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 30; : ' + tok])\n"
      "        os._exit(0)\n"
      "print('parent done')\n",
      limits(), {{"tok.txt", tok}});
  EXPECT_TRUE(r.ok()) << r.describe() << r.stderr_text;
  EXPECT_LT(r.wall_s, 10.0);
  EXPECT_TRUE(nothing_left(r, tok));
}

TEST_P(SandboxHostile, PtraceAndKillTheParent) {
  const std::string kill_all = weak() ? "" : "    os.kill(-1, signal.SIGKILL)\n";
  const SandboxResult r = py(
      "import ctypes, os, signal, time\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print('ptrace', libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno(), flush=True)\n"
      "for pid in (os.getppid(), 1):\n"
      "    try:\n"
      "        os.kill(pid, signal.SIGKILL); print('killed', pid, flush=True)\n"
      "    except OSError as e:\n"
      "        print('refused', pid, e.errno, flush=True)\n"
      "if os.fork() == 0:\n" +
          kill_all +
          "    os._exit(0)\n"
          "time.sleep(0.5)\n"
          "print('alive')\n",
      limits());
  EXPECT_NE(r.stdout_text.find("ptrace -1 1\n"), std::string::npos) << r.stdout_text << r.stderr_text;
  EXPECT_TRUE(nothing_left(r, ""));
  const SandboxResult again = py("print('ok')\n", limits());
  EXPECT_EQ(again.stdout_text, "ok\n") << again.describe();
}

TEST_P(SandboxHostile, HugeFiles) {
  SandboxLimits lim = limits();
  const SandboxResult one = py("open('big', 'wb').write(b'x' * (100 << 20))\n", lim);
  EXPECT_FALSE(one.ok());
  EXPECT_NE(one.stderr_text.find("File too large"), std::string::npos) << one.describe() << one.stderr_text;
  // Many files below the per-file limit: the private /tmp is full at tmp_bytes.
  const SandboxResult many = py(
      "import os\n"
      "n = 0\n"
      "try:\n"
      "    for i in range(40):\n"
      "        open('f%d' % i, 'wb').write(b'x' * (8 << 20)); n += 1\n"
      "except OSError as e:\n"
      "    print('stopped', e.errno)\n"
      "print('files', n)\n",
      lim);
  EXPECT_TRUE(many.ok()) << many.describe() << many.stderr_text;
  if (private_root(many)) EXPECT_NE(many.stdout_text.find("stopped 28"), std::string::npos) << many.stdout_text;
  EXPECT_TRUE(nothing_left(many, ""));
}

TEST_P(SandboxHostile, CpuLoopsIgnoringSignals) {
  SandboxLimits lim = limits();
  lim.cpu_s = 1;
  lim.timeout_s = 30.0;
  const SandboxResult r = py(
      "import os, signal\n"
      "for s in (signal.SIGXCPU, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
      "    signal.signal(s, signal.SIG_IGN)\n"
      "if os.fork() == 0:\n"
      "    while True:\n"
      "        pass\n"
      "while True:\n"
      "    pass\n",
      lim);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.signal == SIGKILL) << r.describe();
  EXPECT_TRUE(nothing_left(r, ""));
}

INSTANTIATE_TEST_SUITE_P(Modes, SandboxHostile, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "namespaces" : "fallback"; });

// As root: the battery again as an unprivileged user (nobody), which takes the
// user-namespace path, and the fallback path without any namespace.
TEST(SandboxHostileNonRoot, BatteryAsNobody) {
  if (geteuid() != 0) GTEST_SKIP() << "already unprivileged";
  if (!fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "no setpriv";
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string log = "/tmp/" + token() + ".log";
  const std::string cmd = "cd /tmp && /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups " + self +
                          " --gtest_filter='Modes/SandboxHostile.*' > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  const std::string out = read_all(log);
  fs::remove(log);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("PASSED"), std::string::npos) << out;
}

}  // namespace
}  // namespace titan::rl
