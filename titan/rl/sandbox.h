// Running untrusted programs (model-written code) in a resource-limited child
// process. Linux only.
//
//   SandboxResult r = run_sandboxed({"/usr/bin/python3", "-c", "print(1)"}, {}, SandboxLimits{});
//   r.exit_code == 0, r.stdout_text == "1\n"
//
// What the child gets (each point is checked in tests/rl/rl_sandbox_test.cpp):
//   - a fresh temporary directory (mkdtemp under $TMPDIR or /tmp) as cwd, HOME and
//     TMPDIR, holding `files`; removed afterwards with everything the program wrote;
//   - an environment of only PATH=/usr/local/bin:/usr/bin:/bin, HOME, TMPDIR,
//     LANG=C.UTF-8, PYTHONHASHSEED=0 (reproducible set/dict order, so rewards are
//     deterministic) and TITAN_SANDBOX_NETNS (1 when the network namespace below
//     is in place, else 0);
//   - stdin from /dev/null; stdout and stderr captured up to output_bytes each
//     (the rest is read and dropped, *_truncated set); fd 3 a third pipe, the
//     "result channel" (result_text), e.g. for a harness's JSON report; no other
//     inherited descriptors;
//   - rlimits: RLIMIT_CPU (cpu_s soft, +1 hard), RLIMIT_AS (memory_bytes),
//     RLIMIT_FSIZE (file_bytes), RLIMIT_NOFILE (max_open_files), RLIMIT_CORE 0,
//     and RLIMIT_NPROC (max_processes; see the uid below);
//   - a new process group, PR_SET_NO_NEW_PRIVS and PR_SET_PDEATHSIG(SIGKILL), so it
//     dies with the caller;
//   - when permitted (root, or unprivileged user namespaces), new network and PID
//     namespaces (clone(CLONE_NEWNET | CLONE_NEWPID [| CLONE_NEWUSER])): no network
//     interface but a down loopback, and a small init (pid 1) that waits for the
//     program; when the init exits or is killed, the kernel kills every process of
//     the namespace, so fork bombs and daemonised children cannot outlive the run.
//     Otherwise (no namespaces): the process group is killed, and when running as
//     root all processes of the sandbox uid too; network access is then NOT blocked
//     at the OS level (TITAN_SANDBOX_NETNS=0 tells a harness to block it itself);
//   - as root: an unprivileged uid/gid of its own (from a range of 100000 ids above
//     kSandboxUidBase, distinct for concurrent runs of this process), so
//     RLIMIT_NPROC counts only this run's processes (the kernel does not apply
//     RLIMIT_NPROC to root) and the program cannot touch files of other users.
// A wall-clock timeout (timeout_s) SIGKILLs the whole sandbox.
//
// Not a defence against kernel exploits; no seccomp filter; the file system is
// readable where the sandbox uid may read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan::rl {

inline constexpr uint32_t kSandboxUidBase = 1'000'000;

struct SandboxLimits {
  double timeout_s = 10.0;                  // wall clock, > 0
  int cpu_s = 10;                           // RLIMIT_CPU seconds, >= 1
  int64_t memory_bytes = int64_t{1} << 30;  // RLIMIT_AS
  int64_t file_bytes = int64_t{16} << 20;   // RLIMIT_FSIZE
  int max_processes = 64;                   // RLIMIT_NPROC (processes + threads of the sandbox uid)
  int max_open_files = 64;                  // RLIMIT_NOFILE
  int64_t output_bytes = int64_t{64} << 10; // per captured stream
  bool namespaces = true;                   // false: skip the namespaces (the fallback path)
  int64_t tmp_bytes = int64_t{64} << 20;    // size of the private /tmp (holding the work dir) and of /dev/shm
  // Host directories bound read-only into the private root besides the system
  // ones (e.g. a virtual environment); absolute paths of directories.
  std::vector<std::string> read_only_paths;
};

struct SandboxFile {
  std::string name;  // a plain file name (no '/')
  std::string content;
};

struct SandboxResult {
  bool started = false;     // false: the sandbox could not be set up (see error)
  int exit_code = -1;       // the program's exit status when it exited
  int signal = 0;           // the signal that killed it, 0 if none
  bool timed_out = false;   // killed at timeout_s
  bool memory_exceeded = false;  // the sandbox as a whole went over memory_bytes (killed)
  std::string stdout_text, stderr_text, result_text;
  bool stdout_truncated = false, stderr_truncated = false, result_truncated = false;
  double wall_s = 0.0;
  std::string isolation;    // e.g. "netns,pidns,uid=1000007" or "pgid"
  std::string error;        // setup failure (started == false) or exec failure

  bool ok() const { return started && !timed_out && signal == 0 && exit_code == 0; }
  // One line: "exit code 3", "killed by signal 11 (SIGSEGV)", "timed out after 2 s", ...
  std::string describe() const;
};

// Runs argv (argv[0] an absolute path) with `files` in a fresh directory under the
// limits above. Never throws for what the program does; throws titan::Error for bad
// arguments (empty argv, relative argv[0], a file name with '/', non-positive
// limits). Thread-safe: concurrent calls run concurrent sandboxes.
SandboxResult run_sandboxed(const std::vector<std::string>& argv, const std::vector<SandboxFile>& files,
                            const SandboxLimits& limits = {});

}  // namespace titan::rl
