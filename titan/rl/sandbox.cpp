// Implementation notes. The child is created with the raw clone system call (so
// namespace flags can be passed) from a possibly multi-threaded process, so
// between clone and execve it may only make system calls: no malloc, no locks, no
// glibc wrappers that talk to other threads (setuid() in glibc signals every
// thread; the raw setresuid syscall changes only the caller, which is all there is).
// Everything the child needs (argv, envp, paths, limits) is prepared before clone.
#include "titan/rl/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "titan/core/error.h"

namespace titan::rl {

namespace {

constexpr int kStdin = 0, kStdout = 1, kStderr = 2, kResultFd = 3;

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Everything the child uses, prepared before clone.
struct ChildPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* workdir = nullptr;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, result_fd = -1;
  int status_fd = -1;  // write end of the status pipe (init mode)
  rlimit cpu{}, as{}, fsize{}, nofile{}, nproc{}, core{};
  bool set_nproc = false;
  bool drop_uid = false;
  uid_t uid = 0;
};

long raw_clone(unsigned long flags) { return syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr); }

void write_str(int fd, const char* s) {
  const ssize_t n = ::write(fd, s, strlen(s));
  (void)n;
}

void close_from(unsigned int lo) {
  if (syscall(SYS_close_range, lo, ~0U, 0) != 0)
    for (int f = static_cast<int>(lo); f < 4096; ++f) ::close(f);
}

[[noreturn]] void child_fail(const char* what) {
  // errno text without strerror (not async-signal-safe): print the number.
  char buf[96];
  int e = errno, n = 0;
  const char* prefix = "titan sandbox: ";
  for (const char* p = prefix; *p && n < 40; ++p) buf[n++] = *p;
  for (const char* p = what; *p && n < 80; ++p) buf[n++] = *p;
  const char* mid = " failed, errno ";
  for (const char* p = mid; *p && n < 90; ++p) buf[n++] = *p;
  char digits[12];
  int d = 0;
  do {
    digits[d++] = static_cast<char>('0' + e % 10);
    e /= 10;
  } while (e > 0 && d < 11);
  while (d > 0 && n < 94) buf[n++] = digits[--d];
  buf[n++] = '\n';
  const ssize_t w = ::write(kStderr, buf, static_cast<size_t>(n));
  (void)w;
  _exit(127);
}

// The sandboxed program's process: fds, cwd, limits, uid, then execve.
[[noreturn]] void exec_program(const ChildPlan& p) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  // Move the four fds above any target number first, then into 0..3.
  int src[4] = {p.stdin_fd, p.stdout_fd, p.stderr_fd, p.result_fd};
  int high[4];
  for (int i = 0; i < 4; ++i)
    if ((high[i] = fcntl(src[i], F_DUPFD, 10)) < 0) child_fail("fcntl(F_DUPFD)");
  for (int i = 0; i < 4; ++i)
    if (dup2(high[i], i) < 0) child_fail("dup2");
  close_from(4);
  if (chdir(p.workdir) != 0) child_fail("chdir");
  if (setrlimit(RLIMIT_CPU, &p.cpu) != 0) child_fail("setrlimit(RLIMIT_CPU)");
  if (setrlimit(RLIMIT_AS, &p.as) != 0) child_fail("setrlimit(RLIMIT_AS)");
  if (setrlimit(RLIMIT_FSIZE, &p.fsize) != 0) child_fail("setrlimit(RLIMIT_FSIZE)");
  if (setrlimit(RLIMIT_NOFILE, &p.nofile) != 0) child_fail("setrlimit(RLIMIT_NOFILE)");
  if (setrlimit(RLIMIT_CORE, &p.core) != 0) child_fail("setrlimit(RLIMIT_CORE)");
  if (p.set_nproc && setrlimit(RLIMIT_NPROC, &p.nproc) != 0) child_fail("setrlimit(RLIMIT_NPROC)");
  if (p.drop_uid) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0) child_fail("setgroups");
    if (syscall(SYS_setresgid, p.uid, p.uid, p.uid) != 0) child_fail("setresgid");
    if (syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) child_fail("setresuid");
  }
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  execve(p.path, p.argv, p.envp);
  child_fail("execve");
}

// pid 1 of the new PID namespace: start the program, wait for it, report its raw
// wait status on status_fd. When this process exits the kernel kills the namespace.
[[noreturn]] void init_main(const ChildPlan& p) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const long pid = raw_clone(0);
  if (pid < 0) {
    write_str(p.stderr_fd, "titan sandbox: clone of the program failed\n");
    _exit(126);
  }
  if (pid == 0) exec_program(p);
  // Keep only the status pipe, so the other pipes see EOF when the program ends.
  if (p.status_fd > 0) syscall(SYS_close_range, 0U, static_cast<unsigned>(p.status_fd - 1), 0);
  close_from(static_cast<unsigned>(p.status_fd + 1));
  int st = 0;
  while (waitpid(static_cast<pid_t>(pid), &st, 0) < 0 && errno == EINTR) {
  }
  const ssize_t w = ::write(p.status_fd, &st, sizeof st);
  (void)w;
  _exit(0);
}

std::vector<char*> c_array(std::vector<std::string>& xs) {
  std::vector<char*> out;
  for (std::string& s : xs) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGXCPU: return "SIGXCPU, CPU time limit";
    case SIGXFSZ: return "SIGXFSZ, file size limit";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

uid_t next_sandbox_uid() {
  static std::atomic<uint32_t> counter{0};
  const uint32_t k = static_cast<uint32_t>(getpid()) * 7919u + counter.fetch_add(1);
  return static_cast<uid_t>(kSandboxUidBase + k % 100000u);
}

// Kills every process of `uid` (root only): a helper drops to uid and kill(-1).
void kill_uid(uid_t uid) {
  const long pid = raw_clone(0);
  if (pid == 0) {
    // Several passes: a process forked while kill(-1) walked the process list
    // may have been missed by the previous pass.
    if (syscall(SYS_setresuid, uid, uid, uid) == 0) {
      for (int pass = 0; pass < 4; ++pass) {
        kill(-1, SIGKILL);
        const timespec ms{0, 1000000};
        nanosleep(&ms, nullptr);
      }
    }
    _exit(0);
  }
  if (pid > 0)
    while (waitpid(static_cast<pid_t>(pid), nullptr, 0) < 0 && errno == EINTR) {
    }
}

// Appends what is readable from fd to out (up to cap, the rest dropped). Returns
// false at EOF or error.
bool drain(int fd, std::string& out, int64_t cap, bool& truncated) {
  char buf[16384];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  const int64_t room = cap - static_cast<int64_t>(out.size());
  if (room >= n) {
    out.append(buf, static_cast<size_t>(n));
  } else {
    if (room > 0) out.append(buf, static_cast<size_t>(room));
    truncated = true;
  }
  return true;
}

}  // namespace

std::string SandboxResult::describe() const {
  if (!started) return "sandbox setup failed: " + error;
  if (timed_out) return fmt::format("timed out after {:.1f} s (killed)", wall_s);
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, signal_name(signal));
  if (!error.empty()) return fmt::format("exit code {} ({})", exit_code, error);
  return fmt::format("exit code {}", exit_code);
}

SandboxResult run_sandboxed(const std::vector<std::string>& argv_in, const std::vector<SandboxFile>& files,
                            const SandboxLimits& limits) {
  namespace fs = std::filesystem;
  TITAN_CHECK(!argv_in.empty(), "run_sandboxed: argv is empty");
  TITAN_CHECK(!argv_in[0].empty() && argv_in[0][0] == '/', "run_sandboxed: argv[0] must be an absolute path, got '{}'",
              argv_in[0]);
  TITAN_CHECK(limits.timeout_s > 0, "run_sandboxed: timeout_s must be > 0, got {}", limits.timeout_s);
  TITAN_CHECK(limits.cpu_s >= 1, "run_sandboxed: cpu_s must be >= 1, got {}", limits.cpu_s);
  TITAN_CHECK(limits.memory_bytes > 0 && limits.file_bytes > 0 && limits.output_bytes > 0,
              "run_sandboxed: memory_bytes, file_bytes and output_bytes must be > 0");
  TITAN_CHECK(limits.max_processes >= 1 && limits.max_open_files >= 8,
              "run_sandboxed: need max_processes >= 1 and max_open_files >= 8, got {} and {}", limits.max_processes,
              limits.max_open_files);
  for (const SandboxFile& f : files)
    TITAN_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "." && f.name != "..",
                "run_sandboxed: file name '{}' must be a plain name", f.name);

  SandboxResult res;
  const auto t0 = std::chrono::steady_clock::now();
  const char* tmp = std::getenv("TMPDIR");
  std::string workdir = std::string(tmp && *tmp ? tmp : "/tmp") + "/titan_sandbox.XXXXXX";
  if (::mkdtemp(workdir.data()) == nullptr) {
    res.error = fmt::format("mkdtemp({}) failed: {}", workdir, strerror(errno));
    return res;
  }
  struct RemoveDir {
    std::string p;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove_dir{workdir};
  for (const SandboxFile& f : files) {
    std::ofstream out(workdir + "/" + f.name, std::ios::binary);
    out << f.content;
    out.close();
    // Readable by the sandbox uid whatever this process's umask.
    if (!out.good() || chmod((workdir + "/" + f.name).c_str(), 0644) != 0) {
      res.error = fmt::format("cannot write {}/{}", workdir, f.name);
      return res;
    }
  }
  const bool root = geteuid() == 0;
  const uid_t uid = root ? next_sandbox_uid() : geteuid();
  if (root && (chown(workdir.c_str(), uid, uid) != 0 || chmod(workdir.c_str(), 0700) != 0)) {
    res.error = fmt::format("cannot hand {} to uid {}: {}", workdir, uid, strerror(errno));
    return res;
  }

  std::vector<std::string> argv = argv_in;
  std::vector<char*> argv_c = c_array(argv);
  auto make_env = [&](bool netns) {
    return std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + workdir, "TMPDIR=" + workdir,
                                    "LANG=C.UTF-8", "PYTHONHASHSEED=0",
                                    std::string("TITAN_SANDBOX_NETNS=") + (netns ? "1" : "0")};
  };
  std::vector<std::string> env_ns = make_env(true), env_plain = make_env(false);
  std::vector<char*> envp_ns = c_array(env_ns), envp_plain = c_array(env_plain);

  int p_out[2], p_err[2], p_res[2], p_status[2];
  if (pipe2(p_out, O_CLOEXEC) || pipe2(p_err, O_CLOEXEC) || pipe2(p_res, O_CLOEXEC) || pipe2(p_status, O_CLOEXEC)) {
    res.error = fmt::format("pipe2 failed: {}", strerror(errno));
    return res;
  }
  Fd out_r(p_out[0]), out_w(p_out[1]), err_r(p_err[0]), err_w(p_err[1]);
  Fd res_r(p_res[0]), res_w(p_res[1]), st_r(p_status[0]), st_w(p_status[1]);
  Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (devnull.fd < 0) {
    res.error = fmt::format("open(/dev/null) failed: {}", strerror(errno));
    return res;
  }

  ChildPlan plan;
  plan.path = argv[0].c_str();
  plan.argv = argv_c.data();
  plan.workdir = workdir.c_str();
  plan.stdin_fd = devnull.fd;
  plan.stdout_fd = out_w.fd;
  plan.stderr_fd = err_w.fd;
  plan.result_fd = res_w.fd;
  plan.status_fd = st_w.fd;
  plan.cpu = {static_cast<rlim_t>(limits.cpu_s), static_cast<rlim_t>(limits.cpu_s + 1)};
  plan.as = {static_cast<rlim_t>(limits.memory_bytes), static_cast<rlim_t>(limits.memory_bytes)};
  plan.fsize = {static_cast<rlim_t>(limits.file_bytes), static_cast<rlim_t>(limits.file_bytes)};
  plan.nofile = {static_cast<rlim_t>(limits.max_open_files), static_cast<rlim_t>(limits.max_open_files)};
  plan.nproc = {static_cast<rlim_t>(limits.max_processes), static_cast<rlim_t>(limits.max_processes)};
  plan.core = {0, 0};
  plan.drop_uid = root;
  plan.uid = uid;
  plan.set_nproc = root;  // as another user it would count all of that user's processes

  // Try namespaces: root -> NEWNET|NEWPID; else NEWUSER|NEWNET|NEWPID; else none.
  struct Attempt {
    unsigned long flags;
    const char* name;
  };
  std::vector<Attempt> attempts;
  if (limits.namespaces) {
    if (root) attempts.push_back({CLONE_NEWNET | CLONE_NEWPID, "netns,pidns"});
    attempts.push_back({CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID, "userns,netns,pidns"});
  }
  attempts.push_back({0, "pgid"});
  long pid = -1;
  bool init_mode = false;
  for (const Attempt& a : attempts) {
    if (a.flags & CLONE_NEWUSER) {
      if (root) continue;  // root got its namespaces or is not allowed any
    }
    init_mode = a.flags != 0;
    plan.envp = init_mode ? envp_ns.data() : envp_plain.data();
    pid = raw_clone(a.flags);
    if (pid == 0) {
      if (init_mode) init_main(plan);
      exec_program(plan);
    }
    if (pid > 0) {
      res.isolation = a.name;
      break;
    }
  }
  if (pid < 0) {
    res.error = fmt::format("clone failed: {}", strerror(errno));
    return res;
  }
  res.started = true;
  if (root) res.isolation += fmt::format(",uid={}", uid);
  out_w.reset();
  err_w.reset();
  res_w.reset();
  st_w.reset();
  devnull.reset();

  Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(limits.timeout_s));
  bool exited = false, killed = false;
  int wait_status = 0;
  std::string status_bytes;
  bool open_out = true, open_err = true, open_res = true, open_st = init_mode;
  bool st_trunc = false;
  std::chrono::steady_clock::time_point drain_until{};
  while (true) {
    if (!exited) {
      const pid_t w = waitpid(static_cast<pid_t>(pid), &wait_status, WNOHANG);
      if (w == static_cast<pid_t>(pid)) {
        exited = true;
        // Without a PID namespace, leftovers may hold the pipes open: kill them.
        if (!init_mode) {
          killpg(static_cast<pid_t>(pid), SIGKILL);
          if (root) kill_uid(uid);
        }
        drain_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      }
    }
    if (exited && !(open_out || open_err || open_res || open_st)) break;
    const auto now = std::chrono::steady_clock::now();
    if (exited && now >= drain_until) break;
    if (!exited && now >= deadline && !killed) {
      killed = true;
      res.timed_out = true;
      kill(static_cast<pid_t>(pid), SIGKILL);
      if (!init_mode) killpg(static_cast<pid_t>(pid), SIGKILL);
      continue;
    }
    std::vector<pollfd> pfds;
    std::vector<int> which;
    auto add = [&](bool open, int fd, int id) {
      if (open) {
        pfds.push_back({fd, POLLIN, 0});
        which.push_back(id);
      }
    };
    add(open_out, out_r.fd, 0);
    add(open_err, err_r.fd, 1);
    add(open_res, res_r.fd, 2);
    add(open_st, st_r.fd, 3);
    if (!exited && pidfd.fd >= 0) add(true, pidfd.fd, 4);
    const auto until = exited ? drain_until : (killed ? now + std::chrono::milliseconds(50) : deadline);
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
    if (pidfd.fd < 0 && !exited) ms = std::min(ms, 10);
    ms = std::max(ms, 1);
    const int n = poll(pfds.data(), pfds.size(), ms);
    if (n < 0 && errno != EINTR) break;
    for (size_t i = 0; n > 0 && i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      switch (which[i]) {
        case 0: open_out = drain(out_r.fd, res.stdout_text, limits.output_bytes, res.stdout_truncated); break;
        case 1: open_err = drain(err_r.fd, res.stderr_text, limits.output_bytes, res.stderr_truncated); break;
        case 2: open_res = drain(res_r.fd, res.result_text, limits.output_bytes, res.result_truncated); break;
        case 3: open_st = drain(st_r.fd, status_bytes, 64, st_trunc); break;
        default: break;  // pidfd: the loop's waitpid picks it up
      }
    }
  }
  if (!exited) {  // drained out of the loop by an error: make sure it is gone
    kill(static_cast<pid_t>(pid), SIGKILL);
    while (waitpid(static_cast<pid_t>(pid), &wait_status, 0) < 0 && errno == EINTR) {
    }
  }
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int program_status = wait_status;
  if (init_mode) {
    if (status_bytes.size() >= sizeof(int)) {
      memcpy(&program_status, status_bytes.data(), sizeof(int));
    } else if (!res.timed_out) {
      // The init died without reporting (killed from outside): report how it died.
      program_status = wait_status;
    }
  }
  if (res.timed_out) {
    res.signal = SIGKILL;
  } else if (WIFSIGNALED(program_status)) {
    res.signal = WTERMSIG(program_status);
  } else if (WIFEXITED(program_status)) {
    res.exit_code = WEXITSTATUS(program_status);
    if (res.exit_code == 127 && res.stderr_text.rfind("titan sandbox: ", 0) == 0)
      res.error = res.stderr_text.substr(0, res.stderr_text.find('\n'));
  }
  return res;
}

}  // namespace titan::rl
