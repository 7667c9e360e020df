// Running untrusted programs (model-written code) in a resource-limited child
// process. Linux only.
//
//   SandboxResult r = run_sandboxed({"/usr/bin/python3", "-c", "print(1)"}, {}, SandboxLimits{});
//   r.exit_code == 0, r.stdout_text == "1\n"
//
// What the program gets (each point is checked in tests/rl/rl_sandbox_test.cpp and
// the hostile-program battery tests/rl/rl_sandbox_hostile_test.cpp; the
// boundaries and their limits per mode are in docs/reliability/sandbox.md):
//   - a supervisor process between it and the caller: pid 1 of a new PID
//     namespace, or (fallback) a child subreaper; it reports the program's wait
//     status, and every process the program starts ends and is reaped with the run
//     (daemons, fork bombs, orphans): the namespace dies with its pid 1, or the
//     host kills the sandbox's cgroup / uid / tracked process tree and the
//     supervisor reaps. The caller itself is made a child subreaper and reaps the
//     orphans of a supervisor that died first;
//   - a fresh work directory (mkdtemp under $TMPDIR or /tmp) as cwd, HOME and
//     TMPDIR, holding `files`; removed afterwards with everything written there;
//   - with namespaces, a private root (mount namespace): read-only binds of /usr,
//     /bin, /sbin, /lib*, /etc and read_only_paths, a private /proc (the PID
//     namespace's), a minimal /dev (null, zero, full, random, urandom) with its own
//     /dev/shm, a private /tmp (tmpfs of tmp_bytes; the work dir is
//     /tmp/titan_sandbox.XXXXXX in it); nothing else of the host's files (no
//     checkout, data sets, home directories or unix sockets) exists in it;
//   - an environment of only PATH=/usr/local/bin:/usr/bin:/bin, HOME, TMPDIR,
//     LANG=C.UTF-8, PYTHONHASHSEED=0 (reproducible set/dict order, so rewards are
//     deterministic) and TITAN_SANDBOX_NETNS (1 in a network namespace, else 0);
//   - stdin from /dev/null; stdout and stderr captured up to output_bytes each
//     (the rest is read and dropped, *_truncated set); fd 3 a third pipe, the
//     "result channel" (result_text), e.g. for a harness's JSON report; no other
//     inherited descriptors;
//   - rlimits: RLIMIT_CPU (cpu_s soft, +1 hard), RLIMIT_AS (memory_bytes),
//     RLIMIT_FSIZE (file_bytes), RLIMIT_NOFILE (max_open_files), RLIMIT_CORE 0,
//     RLIMIT_NPROC (max_processes for the sandbox's own uid; as non-root this
//     user's current task count + max_processes);
//   - memory_bytes and max_processes for the sandbox as a whole: a cgroup of its
//     own (v2 memory.max + pids.max where the caller's cgroup delegates them, else
//     v1 memory.limit_in_bytes + pids.max; root only), else the host sums the
//     resident memory of the sandbox's processes every 20 ms and kills the sandbox
//     above memory_bytes (memory_exceeded);
//   - a new process group, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG(SIGKILL), and a
//     seccomp filter (x86-64, aarch64): socket() fails (EPERM) whatever the
//     family, socketpair() only for AF_UNIX SOCK_STREAM; ptrace,
//     process_vm_readv/writev, mount and namespace calls, clone with namespace
//     flags (clone3: ENOSYS), keyrings, bpf, perf_event_open, userfaultfd,
//     io_uring, module and reboot calls fail with EPERM;
//   - when permitted (root, or unprivileged user namespaces), new network, PID and
//     mount namespaces (clone(CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS
//     [| CLONE_NEWUSER])): no network interface but a down loopback, no abstract
//     unix sockets of the host;
//   - as root: an unprivileged uid/gid of its own (from a range of 100000 ids above
//     kSandboxUidBase, distinct for concurrent runs of this process), so
//     RLIMIT_NPROC counts only this run's processes and the program cannot touch
//     files or processes of other users; on the fallback path what that uid left in
//     /tmp, /var/tmp and /dev/shm is removed after the run.
// A wall-clock timeout (timeout_s) SIGKILLs the whole sandbox.
//
// Not a defence against kernel exploits. The fallback path without root and
// without user namespaces shares the caller's uid: the program can signal the
// caller's processes, read what this user can read and write where this user
// can write (see the doc above); `isolation` names the mode of each run.
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
  // The mode, e.g. "netns,pidns,mntns,seccomp,cgroup1,uid=1000007" (root),
  // "userns,netns,pidns,mntns,seccomp" (non-root with user namespaces), or on the
  // fallback path "pgid,subreaper,seccomp[,cgroup1|cgroup2][,tracked][,uid=N]".
  std::string isolation;
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
