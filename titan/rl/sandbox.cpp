// Implementation notes. The supervisor is created with the raw clone system call
// (so namespace flags can be passed) from a possibly multi-threaded process, so
// between clone and execve it and the program's process may only make system
// calls (sandbox_child.cpp): everything they need is prepared here before clone.
#include "titan/rl/sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "titan/core/error.h"
#include "titan/rl/sandbox_impl.h"

namespace titan::rl {

namespace {

using namespace sandbox_detail;

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

// The titan process adopts orphans of any supervisor that dies before its
// descendants (PR_SET_CHILD_SUBREAPER); run_sandboxed reaps the ones it tracked.
void become_subreaper() {
  static std::once_flag once;
  std::call_once(once, [] { prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); });
}

// Live supervisors of this process (an adopted orphan is never one of them).
std::mutex g_supervisors_mu;
std::set<pid_t> g_supervisors;

unsigned long statvfs_flags(const char* path) {
  struct statvfs sv {};
  if (statvfs(path, &sv) != 0) return MS_NOSUID | MS_NODEV;
  unsigned long f = MS_NOSUID | MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
  return f;
}

// Tasks (threads included) whose /proc entry belongs to uid: what RLIMIT_NPROC counts.
int tasks_of_uid(const std::vector<ProcInfo>& procs, uid_t uid) {
  int n = 0;
  for (const ProcInfo& p : procs) n += p.uid == uid ? std::max(p.threads, 1) : 0;
  return n;
}

}  // namespace

std::string SandboxResult::describe() const {
  if (!started) return "sandbox setup failed: " + error;
  if (memory_exceeded) return fmt::format("killed: the sandbox's memory limit was exceeded ({:.1f} s)", wall_s);
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
  TITAN_CHECK(limits.memory_bytes > 0 && limits.file_bytes > 0 && limits.output_bytes > 0 && limits.tmp_bytes > 0,
              "run_sandboxed: memory_bytes, file_bytes, output_bytes and tmp_bytes must be > 0");
  TITAN_CHECK(limits.max_processes >= 1 && limits.max_open_files >= 8,
              "run_sandboxed: need max_processes >= 1 and max_open_files >= 8, got {} and {}", limits.max_processes,
              limits.max_open_files);
  for (const SandboxFile& f : files)
    TITAN_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name != "." && f.name != "..",
                "run_sandboxed: file name '{}' must be a plain name", f.name);
  for (const std::string& p : limits.read_only_paths)
    TITAN_CHECK(!p.empty() && p[0] == '/' && p.find("/..") == std::string::npos && fs::is_directory(p),
                "run_sandboxed: read_only_paths entry '{}' must be an absolute path of a directory", p);
  become_subreaper();

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
  const std::string name = fs::path(workdir).filename().string();
  const std::string inner_workdir = "/tmp/" + name;

  // A cgroup of its own (root): memory.max and pids.max for the whole sandbox.
  Cgroup cgroup;
  if (root) cgroup.create(name, limits.memory_bytes, limits.max_processes + 2);

  std::vector<std::string> argv = argv_in;
  std::vector<char*> argv_c = c_array(argv);
  auto make_env = [&](bool netns, const std::string& home) {
    return std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home,
                                    "LANG=C.UTF-8", "PYTHONHASHSEED=0",
                                    std::string("TITAN_SANDBOX_NETNS=") + (netns ? "1" : "0")};
  };
  std::vector<std::string> env_ns = make_env(true, inner_workdir), env_plain = make_env(false, workdir);
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

  // RLIMIT_NPROC counts every process of the real uid: the sandbox's own uid
  // (root), or this user's tasks now plus the sandbox's share (non-root).
  const std::vector<ProcInfo> procs0 = root ? std::vector<ProcInfo>{} : scan_procs();
  const int nproc = root ? limits.max_processes : tasks_of_uid(procs0, uid) + limits.max_processes;
  const std::vector<sock_filter> filter = seccomp_filter();

  ChildPlan plan;
  plan.path = argv[0].c_str();
  plan.argv = argv_c.data();
  plan.stdin_fd = devnull.fd;
  plan.stdout_fd = out_w.fd;
  plan.stderr_fd = err_w.fd;
  plan.result_fd = res_w.fd;
  plan.status_fd = st_w.fd;
  plan.cpu = {static_cast<rlim_t>(limits.cpu_s), static_cast<rlim_t>(limits.cpu_s + 1)};
  plan.as = {static_cast<rlim_t>(limits.memory_bytes), static_cast<rlim_t>(limits.memory_bytes)};
  plan.fsize = {static_cast<rlim_t>(limits.file_bytes), static_cast<rlim_t>(limits.file_bytes)};
  plan.nofile = {static_cast<rlim_t>(limits.max_open_files), static_cast<rlim_t>(limits.max_open_files)};
  plan.nproc = {static_cast<rlim_t>(nproc), static_cast<rlim_t>(nproc)};
  plan.core = {0, 0};
  plan.set_nproc = true;
  plan.drop_uid = root;
  plan.uid = uid;
  plan.seccomp = sock_fprog{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
  for (const std::string& f : cgroup.procs_files()) plan.cgroup_procs.push_back(f.c_str());

  // The private root for the namespace attempts, all strings kept in `keep`.
  std::deque<std::string> keep;
  auto c = [&](std::string s) { return keep.emplace_back(std::move(s)).c_str(); };
  ChildPlan ns_plan = plan;
  const std::string root_dir = workdir + "/.root";
  {
    ns_plan.root_dir = c(root_dir);
    ns_plan.workdir = c(inner_workdir);
    ns_plan.envp = envp_ns.data();
    ns_plan.old_root = c(root_dir + "/.old_root");
    ns_plan.inner_workdir_host = c(root_dir + inner_workdir);
    ns_plan.tmpfs_opts_root = "size=1m,mode=0755";
    ns_plan.tmpfs_opts_tmp = c(fmt::format("size={},mode=1777", limits.tmp_bytes));
    std::set<std::string> made;
    auto mkdirs = [&](const std::string& inside) {  // inside: "/a/b" -> "<root>/a", "<root>/a/b"
      for (size_t at = 1; at <= inside.size(); ++at) {
        if (at != inside.size() && inside[at] != '/') continue;
        const std::string d = root_dir + inside.substr(0, at);
        if (made.insert(d).second) ns_plan.mkdirs.push_back(c(d));
      }
    };
    for (const char* d : {"/proc", "/dev", "/tmp", "/var", "/.old_root"}) mkdirs(d);
    std::vector<std::string> binds = {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"};
    for (const std::string& p : limits.read_only_paths) binds.push_back(fs::path(p).lexically_normal().string());
    for (const std::string& host : binds) {
      struct stat st {};
      if (lstat(host.c_str(), &st) != 0) continue;
      RootEntry e;
      e.host = c(host);
      e.inside = c(root_dir + host);
      if (S_ISLNK(st.st_mode)) {
        std::error_code ec;
        const std::string target = fs::read_symlink(host, ec).string();
        if (ec) continue;
        mkdirs(fs::path(host).parent_path().string());
        e.symlink = c(target);
      } else if (S_ISDIR(st.st_mode)) {
        mkdirs(host);
        e.remount_flags = statvfs_flags(host.c_str());
      } else {
        continue;
      }
      ns_plan.root_entries.push_back(e);
    }
    for (const char* d : {"null", "zero", "full", "random", "urandom"}) {
      ns_plan.dev_src.push_back(c(std::string("/dev/") + d));
      ns_plan.dev_dst.push_back(c(root_dir + "/dev/" + d));
    }
    for (const SandboxFile& f : files) {
      ns_plan.copy_src.push_back(c(workdir + "/" + f.name));
      ns_plan.copy_dst.push_back(c(root_dir + inner_workdir + "/" + f.name));
    }
    if (!root) {
      ns_plan.uid_map = c(fmt::format("1000 {} 1", getuid()));
      ns_plan.gid_map = c(fmt::format("1000 {} 1", getgid()));
    }
  }
  ChildPlan plain_plan = plan;
  plain_plan.workdir = workdir.c_str();
  plain_plan.envp = envp_plain.data();
  plain_plan.subreaper = true;

  // Namespaces: root -> NEWNET|NEWPID|NEWNS; else NEWUSER too; else none.
  struct Attempt {
    unsigned long flags;
    const char* name;
    const ChildPlan* plan;
  };
  std::vector<Attempt> attempts;
  if (limits.namespaces) {
    attempts.push_back(root ? Attempt{CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS, "netns,pidns,mntns", &ns_plan}
                            : Attempt{CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS,
                                      "userns,netns,pidns,mntns", &ns_plan});
  }
  attempts.push_back({0, "pgid,subreaper", &plain_plan});
  long pid = -1;
  bool in_pidns = false;
  for (const Attempt& a : attempts) {
    in_pidns = a.flags != 0;
    if (in_pidns && mkdir(root_dir.c_str(), 0700) != 0) continue;
    std::lock_guard<std::mutex> lock(g_supervisors_mu);
    pid = raw_clone(a.flags);
    if (pid == 0) supervisor_main(*a.plan);
    if (pid > 0) {
      g_supervisors.insert(static_cast<pid_t>(pid));
      res.isolation = a.name;
      break;
    }
    if (in_pidns) rmdir(root_dir.c_str());
  }
  if (pid < 0) {
    res.error = fmt::format("clone failed: {}", strerror(errno));
    return res;
  }
  res.started = true;
  if (!filter.empty()) res.isolation += ",seccomp";
  if (cgroup.active()) res.isolation += "," + cgroup.describe();
  const bool track = !in_pidns && !root;  // no uid of its own to kill by: follow the tree
  if (track) res.isolation += ",tracked";
  if (root) res.isolation += fmt::format(",uid={}", uid);
  out_w.reset();
  err_w.reset();
  res_w.reset();
  st_w.reset();
  devnull.reset();

  const pid_t sup = static_cast<pid_t>(pid);
  // Processes seen in the sandbox's tree (pid -> start time), for the kill and
  // the reaping of orphans adopted by this process.
  std::map<pid_t, uint64_t> tracked;
  uint64_t sup_start = 0;
  auto members = [&](const std::vector<ProcInfo>& procs) {
    std::vector<ProcInfo> m = descendants(procs, sup);
    std::set<pid_t> in;
    for (const ProcInfo& p : m) in.insert(p.pid);
    // Tracked processes that left the tree (their supervisor died) and theirs.
    for (const ProcInfo& p : procs) {
      auto it = tracked.find(p.pid);
      const bool was_ours = it != tracked.end() && it->second == p.start;
      if (!was_ours || in.count(p.pid)) continue;
      m.push_back(p);
      in.insert(p.pid);
      for (const ProcInfo& d : descendants(procs, p.pid))
        if (in.insert(d.pid).second) m.push_back(d);
    }
    return m;
  };
  auto update_tracking = [&](const std::vector<ProcInfo>& procs) {
    for (const ProcInfo& p : procs)
      if (p.pid == sup) sup_start = p.start;
    for (const ProcInfo& p : members(procs)) tracked[p.pid] = p.start;
  };
  // Kills every process of the sandbox but the supervisor (which then reaps them).
  auto kill_members = [&] {
    cgroup.kill_all();
    if (root && !in_pidns) kill_uid(uid);
    if (!track) return;
    for (int pass = 0; pass < 1000; ++pass) {
      const std::vector<ProcInfo> procs = scan_procs();
      bool any = false;
      for (const ProcInfo& p : members(procs)) {
        if (p.state == 'Z' || p.state == 'X') continue;
        tracked[p.pid] = p.start;
        kill(p.pid, SIGKILL);
        any = true;
      }
      if (!any) return;
      const timespec ms{0, 1000000};
      nanosleep(&ms, nullptr);
    }
  };

  Fd pidfd(static_cast<int>(syscall(SYS_pidfd_open, sup, 0)));
  const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(limits.timeout_s));
  const bool account = !cgroup.active();  // no memory cgroup: sum the tree's resident memory
  const auto scan_every = std::chrono::milliseconds(20);
  auto next_scan = t0;
  bool sup_exited = false, killed = false, program_done = false;
  int sup_status = 0;
  std::string status_bytes;
  bool open_out = true, open_err = true, open_res = true, open_st = true;
  bool st_trunc = false;
  auto reap_supervisor = [&](bool block) {
    if (sup_exited) return;
    const pid_t w = waitpid(sup, &sup_status, block ? 0 : WNOHANG);
    if (w == sup) sup_exited = true;
  };
  auto stop = [&](bool timed_out) {
    killed = true;
    if (timed_out) res.timed_out = true;
    if (in_pidns) {
      kill(sup, SIGKILL);  // pid 1 of the namespace: the kernel kills the rest
    } else {
      kill_members();
    }
  };
  // The poll set of the four pipes still open (ids 0-3) and what a ready one drains into.
  std::vector<pollfd> pfds;
  std::vector<int> which;
  auto poll_pipes = [&] {
    pfds.clear();
    which.clear();
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
  };
  auto drain_ready = [&](int n) {
    for (size_t i = 0; n > 0 && i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      switch (which[i]) {
        case 0: open_out = drain(out_r.fd, res.stdout_text, limits.output_bytes, res.stdout_truncated); break;
        case 1: open_err = drain(err_r.fd, res.stderr_text, limits.output_bytes, res.stderr_truncated); break;
        case 2: open_res = drain(res_r.fd, res.result_text, limits.output_bytes, res.result_truncated); break;
        case 3: open_st = drain(st_r.fd, status_bytes, 64, st_trunc); break;
        default: break;  // pidfd (id 4): the loop's waitpid picks it up
      }
    }
  };
  while (true) {
    reap_supervisor(false);
    if (status_bytes.size() >= sizeof(int)) program_done = true;
    if (sup_exited || program_done || killed) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      stop(true);
      break;
    }
    if ((account || track) && now >= next_scan) {
      next_scan = now + scan_every;
      const std::vector<ProcInfo> procs = scan_procs();
      if (track) update_tracking(procs);
      if (account) {
        int64_t rss = 0;
        for (const ProcInfo& p : descendants(procs, sup)) rss += p.rss_bytes;
        if (rss > limits.memory_bytes) {
          res.memory_exceeded = true;
          stop(false);
          break;
        }
      }
    }
    poll_pipes();
    if (pidfd.fd >= 0) {
      pfds.push_back({pidfd.fd, POLLIN, 0});
      which.push_back(4);
    }
    auto until = deadline;
    if (account || track) until = std::min(until, next_scan);
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
    if (pidfd.fd < 0) ms = std::min(ms, 10);
    ms = std::max(ms, 1);
    const int n = poll(pfds.data(), pfds.size(), ms);
    if (n < 0 && errno != EINTR) break;
    drain_ready(n);
  }
  // The program ended, was killed, or its supervisor died: end everything else.
  if (!killed) {
    if (in_pidns) {
      kill(sup, SIGKILL);
    } else {
      if (track) update_tracking(scan_procs());
      kill_members();
    }
  }
  // The supervisor exits once it has reaped everything; kill it if it does not.
  const auto sup_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!sup_exited && std::chrono::steady_clock::now() < sup_deadline) {
    reap_supervisor(false);
    if (!sup_exited) {
      if (!in_pidns) kill_members();
      const timespec ms{0, 2000000};
      nanosleep(&ms, nullptr);
    }
  }
  if (!sup_exited) {
    kill(sup, SIGKILL);
    reap_supervisor(true);
  }
  {
    std::lock_guard<std::mutex> lock(g_supervisors_mu);
    g_supervisors.erase(sup);
  }
  // Orphans adopted by this process (the supervisor died before them): kill and reap.
  if (!in_pidns) {
    for (int pass = 0; pass < 100; ++pass) {
      const std::vector<ProcInfo> procs = scan_procs();
      std::vector<pid_t> adopted;
      for (const ProcInfo& p : procs) {
        if (p.ppid != getpid()) continue;
        auto it = tracked.find(p.pid);
        bool ours = it != tracked.end() && it->second == p.start;
        {
          std::lock_guard<std::mutex> lock(g_supervisors_mu);
          // Not tracked yet but started after this supervisor, and no supervisor: ours.
          ours = ours || (!g_supervisors.count(p.pid) &&
                          ((root && p.uid == uid) || (track && sup_start != 0 && p.start >= sup_start)));
        }
        if (ours) adopted.push_back(p.pid);
      }
      if (adopted.empty()) break;
      for (pid_t a : adopted) {
        for (const ProcInfo& d : descendants(procs, a)) kill(d.pid, SIGKILL);
        kill(a, SIGKILL);
        while (waitpid(a, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
    }
  }
  // Drain what the pipes still hold (nothing of the sandbox can write any more).
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while ((open_out || open_err || open_res || open_st) && std::chrono::steady_clock::now() < drain_until) {
    poll_pipes();
    const int n = poll(pfds.data(), pfds.size(), 50);
    if (n < 0 && errno != EINTR) break;
    drain_ready(n);
  }
  // Without a private /tmp (fallback as root): what the sandbox uid left in the
  // shared temporary directories goes too.
  if (root && !in_pidns) {
    for (const char* dir : {"/tmp", "/var/tmp", "/dev/shm"}) {
      std::error_code ec;
      for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        struct stat st {};
        if (lstat(it->path().c_str(), &st) == 0 && st.st_uid == uid) {
          std::error_code ec2;
          fs::remove_all(it->path(), ec2);
        }
      }
    }
  }
  if (cgroup.oom_killed()) res.memory_exceeded = true;
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int program_status = sup_status;
  if (status_bytes.size() >= sizeof(int)) memcpy(&program_status, status_bytes.data(), sizeof(int));
  if (res.timed_out || (res.memory_exceeded && status_bytes.size() < sizeof(int))) {
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
