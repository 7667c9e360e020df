// Internals of run_sandboxed (sandbox.cpp): the child side (sandbox_child.cpp:
// supervisor, private root, seccomp filter, exec) and the host side's process
// bookkeeping (sandbox_procs.cpp: cgroups, /proc scans, kills).
#pragma once
#include <linux/filter.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace titan::rl::sandbox_detail {

// One path of the host bound read-only into the private root: a directory bind
// mount, or (symlink set) a symlink with that target.
struct RootEntry {
  const char* host = nullptr;    // e.g. "/usr"
  const char* inside = nullptr;  // the same path under the new root, e.g. "<root>/usr"
  const char* symlink = nullptr; // non-null: create a symlink instead of a bind
  unsigned long remount_flags = 0;  // MS_* flags for the read-only remount (locked flags kept)
};

// Everything the child processes use, prepared before clone (the children of a
// multi-threaded process may only make system calls until execve).
struct ChildPlan {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* workdir = nullptr;  // the program's cwd, as the program sees it
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, result_fd = -1;
  int status_fd = -1;  // write end of the status pipe (supervisor -> host)
  rlimit cpu{}, as{}, fsize{}, nofile{}, nproc{}, core{};
  bool set_nproc = false;
  bool drop_uid = false;
  uid_t uid = 0;
  bool subreaper = false;  // supervisor outside a PID namespace: adopt orphans, reap all
  // cgroup.procs files the program's process joins before dropping its uid.
  std::vector<const char*> cgroup_procs;
  // Private root (mount namespace); root_dir == nullptr: none.
  const char* root_dir = nullptr;  // host path of an empty directory, the new root's mount point
  std::vector<RootEntry> root_entries;
  const char* tmpfs_opts_root = nullptr;  // "size=...,mode=0755"
  const char* tmpfs_opts_tmp = nullptr;   // "size=...,mode=1777" for /tmp and /dev/shm
  const char* inner_workdir_host = nullptr;  // <root>/tmp/<name> (before pivot_root)
  std::vector<const char*> copy_src;  // host files copied into the work dir
  std::vector<const char*> copy_dst;
  std::vector<const char*> dev_src;  // /dev/null ... bound into <root>/dev
  std::vector<const char*> dev_dst;
  std::vector<const char*> mkdirs;   // directories created under the new root, in order
  const char* old_root = nullptr;    // <root>/.old_root
  // User namespace (non-root): the uid/gid map lines written for the supervisor.
  const char* uid_map = nullptr;
  const char* gid_map = nullptr;
  // seccomp filter installed just before execve.
  sock_fprog seccomp{};
};

// The supervisor: builds the private root (when asked), starts
// the program, writes its raw wait status on status_fd, reaps every descendant it
// adopted, exits. Never returns.
[[noreturn]] void supervisor_main(const ChildPlan& p);

long raw_clone(unsigned long flags);

// The filter of sandbox.h (denied: socket(), socketpair() except AF_UNIX
// SOCK_STREAM, ptrace, process_vm_*, namespace and mount calls, keyrings, bpf,
// perf, io_uring, kernel modules...). Empty when the architecture is not
// supported (then no filter is installed and the isolation string says so).
std::vector<sock_filter> seccomp_filter();

// Host side.
struct ProcInfo {
  pid_t pid = 0, ppid = 0;
  uint64_t start = 0;  // start time, clock ticks since boot
  int64_t rss_bytes = 0;
  int threads = 0;
  uid_t uid = 0;  // owner of /proc/<pid> (the effective uid)
  char state = '?';
};
std::vector<ProcInfo> scan_procs();
// pid and every descendant of it (by parent links in `procs`).
std::vector<ProcInfo> descendants(const std::vector<ProcInfo>& procs, pid_t root);

// A per-sandbox cgroup: v2 (memory.max, pids.max, cgroup.kill) where the caller's
// cgroup delegates the memory and pids controllers, else v1 memory + pids
// hierarchies. create() returns false (and leaves nothing) when neither is usable.
class Cgroup {
 public:
  bool create(const std::string& name, int64_t memory_bytes, int max_pids);
  ~Cgroup();
  const std::vector<std::string>& procs_files() const { return procs_files_; }
  // SIGKILLs every process in the cgroup(s) until they are empty (or ~1 s).
  void kill_all();
  // The memory controller killed a process for the limit.
  bool oom_killed() const;
  std::string describe() const { return kind_; }
  bool active() const { return !dirs_.empty(); }

 private:
  std::vector<std::string> dirs_, procs_files_;
  std::string memory_dir_, kind_;
  bool v2_ = false;
};

}  // namespace titan::rl::sandbox_detail
