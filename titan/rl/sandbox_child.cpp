// The child side of run_sandboxed: the supervisor process (pid 1 of the PID
// namespace, or a child subreaper without one), the private root of the mount
// namespace, the seccomp filter and the program's exec. Between clone and execve
// these processes make only system calls (see sandbox_impl.h).
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "titan/rl/sandbox_impl.h"

namespace titan::rl::sandbox_detail {

namespace {

constexpr int kStderr = 2;

// "titan sandbox: <what> failed, errno N\n" on fd, without strerror (not
// async-signal-safe), then exit 127.
[[noreturn]] void fail_to(int fd, const char* what) {
  char buf[160];
  int e = errno, n = 0;
  auto put = [&](const char* s) {
    for (; *s && n < 150; ++s) buf[n++] = *s;
  };
  put("titan sandbox: ");
  put(what);
  put(" failed, errno ");
  char digits[12];
  int d = 0;
  do {
    digits[d++] = static_cast<char>('0' + e % 10);
    e /= 10;
  } while (e > 0 && d < 11);
  while (d > 0 && n < 158) buf[n++] = digits[--d];
  buf[n++] = '\n';
  const ssize_t w = ::write(fd, buf, static_cast<size_t>(n));
  (void)w;
  _exit(127);
}

void close_from(unsigned int lo) {
  if (syscall(SYS_close_range, lo, ~0U, 0) != 0)
    for (int f = static_cast<int>(lo); f < 4096; ++f) ::close(f);
}

bool write_file(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t n = strlen(text);
  const bool ok = ::write(fd, text, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok;
}

bool copy_file(const char* src, const char* dst, bool chown_to, uid_t uid) {
  const int in = ::open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  const int out = ::open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    ::close(in);
    return false;
  }
  char buf[16384];
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(in, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(out, buf + off, static_cast<size_t>(n - off));
      if (w <= 0) {
        ok = false;
        break;
      }
      off += w;
    }
    if (!ok) break;
  }
  if (ok && chown_to && fchown(out, uid, uid) != 0) ok = false;
  ::close(in);
  ::close(out);
  return ok;
}

// "<root>/x" for a few fixed names: the buffers live on this process's stack.
struct Path {
  char s[4096];
  Path(const char* root, const char* tail) {
    size_t n = 0;
    for (const char* p = root; *p && n < sizeof s - 1; ++p) s[n++] = *p;
    for (const char* p = tail; *p && n < sizeof s - 1; ++p) s[n++] = *p;
    s[n] = '\0';
  }
};

// Builds the private root: a small read-only tmpfs holding read-only binds of the
// system directories, a private /proc, a minimal /dev with its own /dev/shm, and
// a private /tmp holding the work dir; then pivot_root into it and drop the old
// root.
void setup_root(const ChildPlan& p) {
  const int err = p.stderr_fd;
  const char* r = p.root_dir;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail_to(err, "mount(/, private)");
  if (mount("tmpfs", r, "tmpfs", MS_NOSUID | MS_NODEV, p.tmpfs_opts_root) != 0) fail_to(err, "mount(tmpfs root)");
  for (const char* d : p.mkdirs)
    if (mkdir(d, 0755) != 0 && errno != EEXIST) fail_to(err, "mkdir in the new root");
  for (const RootEntry& e : p.root_entries) {
    if (e.symlink != nullptr) {
      if (symlink(e.symlink, e.inside) != 0) fail_to(err, "symlink in the new root");
      continue;
    }
    if (mount(e.host, e.inside, nullptr, MS_BIND | MS_REC, nullptr) != 0) fail_to(err, "bind mount");
    if (mount(nullptr, e.inside, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | e.remount_flags, nullptr) != 0)
      fail_to(err, "read-only remount");
  }
  const Path proc(r, "/proc"), dev(r, "/dev"), shm(r, "/dev/shm"), tmp(r, "/tmp");
  if (mount("proc", proc.s, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) fail_to(err, "mount(proc)");
  if (mount("tmpfs", dev.s, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755") != 0) fail_to(err, "mount(/dev)");
  for (size_t i = 0; i < p.dev_src.size(); ++i) {
    const int fd = ::open(p.dev_dst[i], O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fail_to(err, "create a /dev node");
    ::close(fd);
    if (mount(p.dev_src[i], p.dev_dst[i], nullptr, MS_BIND, nullptr) != 0) fail_to(err, "bind a /dev node");
  }
  static const char* const links[][2] = {
      {"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
      {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"}};
  for (const auto& l : links) {
    const Path at(r, l[1]);
    if (symlink(l[0], at.s) != 0) fail_to(err, "symlink in /dev");
  }
  if (mkdir(shm.s, 01777) != 0) fail_to(err, "mkdir(/dev/shm)");
  if (mount("tmpfs", shm.s, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, p.tmpfs_opts_tmp) != 0)
    fail_to(err, "mount(/dev/shm)");
  if (mount("tmpfs", tmp.s, "tmpfs", MS_NOSUID | MS_NODEV, p.tmpfs_opts_tmp) != 0) fail_to(err, "mount(/tmp)");
  if (mkdir(p.inner_workdir_host, 0700) != 0) fail_to(err, "mkdir(work dir)");
  if (p.drop_uid && chown(p.inner_workdir_host, p.uid, p.uid) != 0) fail_to(err, "chown(work dir)");
  for (size_t i = 0; i < p.copy_src.size(); ++i)
    if (!copy_file(p.copy_src[i], p.copy_dst[i], p.drop_uid, p.uid)) fail_to(err, "copy of a sandbox file");
  const Path var_tmp(r, "/var/tmp");
  if (symlink("/tmp", var_tmp.s) != 0) fail_to(err, "symlink(/var/tmp)");
  if (syscall(SYS_pivot_root, r, p.old_root) != 0) fail_to(err, "pivot_root");
  if (chdir("/") != 0) fail_to(err, "chdir(/)");
  if (umount2("/.old_root", MNT_DETACH) != 0) fail_to(err, "umount(old root)");
  if (rmdir("/.old_root") != 0) fail_to(err, "rmdir(old root)");
  if (mount(nullptr, "/", nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    fail_to(err, "read-only remount of /");
}

// The sandboxed program's process: fds, cwd, limits, uid, seccomp, then execve.
[[noreturn]] void exec_program(const ChildPlan& p) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  // Move the four fds above any target number first, then into 0..3.
  int src[4] = {p.stdin_fd, p.stdout_fd, p.stderr_fd, p.result_fd};
  int high[4];
  for (int i = 0; i < 4; ++i)
    if ((high[i] = fcntl(src[i], F_DUPFD, 10)) < 0) fail_to(p.stderr_fd, "fcntl(F_DUPFD)");
  for (int i = 0; i < 4; ++i)
    if (dup2(high[i], i) < 0) fail_to(p.stderr_fd, "dup2");
  close_from(4);
  // Without a private root the program joins the sandbox's cgroups (the
  // supervisor stays out, so that killing the cgroup leaves it to reap).
  if (p.root_dir == nullptr)
    for (const char* f : p.cgroup_procs)
      if (!write_file(f, "0")) fail_to(kStderr, "joining the sandbox cgroup");
  if (chdir(p.workdir) != 0) fail_to(kStderr, "chdir");
  if (setrlimit(RLIMIT_CPU, &p.cpu) != 0) fail_to(kStderr, "setrlimit(RLIMIT_CPU)");
  if (setrlimit(RLIMIT_AS, &p.as) != 0) fail_to(kStderr, "setrlimit(RLIMIT_AS)");
  if (setrlimit(RLIMIT_FSIZE, &p.fsize) != 0) fail_to(kStderr, "setrlimit(RLIMIT_FSIZE)");
  if (setrlimit(RLIMIT_NOFILE, &p.nofile) != 0) fail_to(kStderr, "setrlimit(RLIMIT_NOFILE)");
  if (setrlimit(RLIMIT_CORE, &p.core) != 0) fail_to(kStderr, "setrlimit(RLIMIT_CORE)");
  if (p.set_nproc && setrlimit(RLIMIT_NPROC, &p.nproc) != 0) fail_to(kStderr, "setrlimit(RLIMIT_NPROC)");
  if (p.drop_uid) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0) fail_to(kStderr, "setgroups");
    if (syscall(SYS_setresgid, p.uid, p.uid, p.uid) != 0) fail_to(kStderr, "setresgid");
    if (syscall(SYS_setresuid, p.uid, p.uid, p.uid) != 0) fail_to(kStderr, "setresuid");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_to(kStderr, "prctl(PR_SET_NO_NEW_PRIVS)");
  if (p.seccomp.len > 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p.seccomp) != 0)
    fail_to(kStderr, "prctl(PR_SET_SECCOMP)");
  execve(p.path, p.argv, p.envp);
  fail_to(kStderr, "execve");
}

}  // namespace

long raw_clone(unsigned long flags) { return syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr); }

[[noreturn]] void supervisor_main(const ChildPlan& p) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int err = p.stderr_fd;
  if (p.uid_map != nullptr) {
    if (!write_file("/proc/self/setgroups", "deny")) fail_to(err, "write /proc/self/setgroups");
    if (!write_file("/proc/self/uid_map", p.uid_map)) fail_to(err, "write /proc/self/uid_map");
    if (!write_file("/proc/self/gid_map", p.gid_map)) fail_to(err, "write /proc/self/gid_map");
  }
  // With a private root (where /sys/fs/cgroup is not mounted) the supervisor
  // joins them: it is pid 1 of the namespace, so killing it ends everything anyway.
  if (p.root_dir != nullptr)
    for (const char* f : p.cgroup_procs)
      if (!write_file(f, "0")) fail_to(err, "joining the sandbox cgroup");
  if (p.subreaper && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) fail_to(err, "prctl(PR_SET_CHILD_SUBREAPER)");
  if (p.root_dir != nullptr) setup_root(p);
  const long pid = raw_clone(0);
  if (pid < 0) fail_to(err, "clone of the program");
  if (pid == 0) exec_program(p);
  // Keep only the status pipe, so the other pipes see EOF when the program's
  // processes end.
  if (p.status_fd > 0) syscall(SYS_close_range, 0U, static_cast<unsigned>(p.status_fd - 1), 0);
  close_from(static_cast<unsigned>(p.status_fd + 1));
  int st = 0;
  while (waitpid(static_cast<pid_t>(pid), &st, 0) < 0 && errno == EINTR) {
  }
  const ssize_t w = ::write(p.status_fd, &st, sizeof st);
  (void)w;
  // Outside a PID namespace the host kills what is left; reap all of it here
  // (orphans are adopted by this subreaper) so that no zombie remains. In a PID
  // namespace, this process exiting makes the kernel kill the namespace.
  if (p.subreaper) {
    for (;;) {
      if (waitpid(-1, nullptr, 0) < 0 && errno == ECHILD) break;
    }
  }
  _exit(0);
}

std::vector<sock_filter> seccomp_filter() {
  std::vector<sock_filter> f;
#if defined(__x86_64__) || defined(__aarch64__)
#if defined(__x86_64__)
  constexpr uint32_t arch = AUDIT_ARCH_X86_64;
#else
  constexpr uint32_t arch = AUDIT_ARCH_AARCH64;
#endif
  auto stmt = [&](uint16_t code, uint32_t k) { f.push_back(BPF_STMT(code, k)); };
  auto jump = [&](uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { f.push_back(BPF_JUMP(code, k, jt, jf)); };
  constexpr uint32_t kDeny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  constexpr uint32_t kNoSys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch));
  jump(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr));
#if defined(__x86_64__)
  // The x32 ABI numbers every call again: refuse it whole.
  jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1);
  stmt(BPF_RET | BPF_K, kDeny);
#endif
  const long denied[] = {
      SYS_socket, SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_keyctl, SYS_add_key,
      SYS_request_key, SYS_bpf, SYS_perf_event_open, SYS_userfaultfd, SYS_io_uring_setup, SYS_io_uring_enter,
      SYS_io_uring_register, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_unshare, SYS_setns,
      SYS_kexec_load, SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_open_by_handle_at,
      SYS_name_to_handle_at, SYS_acct, SYS_swapon, SYS_swapoff, SYS_reboot, SYS_sethostname, SYS_setdomainname,
      SYS_syslog, SYS_pidfd_getfd, SYS_fsopen, SYS_fsmount, SYS_move_mount, SYS_open_tree, SYS_mount_setattr,
#if defined(__x86_64__)
      SYS_iopl, SYS_ioperm, SYS_kexec_file_load,
#endif
  };
  for (long nr : denied) {
    jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1);
    stmt(BPF_RET | BPF_K, kDeny);
  }
  // clone3 passes its flags in memory the filter cannot read: ENOSYS makes libc
  // fall back to clone, whose flags are checked below.
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
  stmt(BPF_RET | BPF_K, kNoSys);
  constexpr uint32_t ns_flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                                CLONE_NEWUTS | CLONE_NEWCGROUP;
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));
  jump(BPF_JMP | BPF_JSET | BPF_K, ns_flags, 0, 1);
  stmt(BPF_RET | BPF_K, kDeny);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  // socketpair: AF_UNIX SOCK_STREAM only (a datagram pair could send to a named
  // socket of the host with sendmsg's address).
  jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_socketpair, 0, 7);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0]));
  jump(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 1, 0);
  stmt(BPF_RET | BPF_K, kDeny);
  stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[1]));
  stmt(BPF_ALU | BPF_AND | BPF_K, 0xf);
  jump(BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, 1, 0);
  stmt(BPF_RET | BPF_K, kDeny);
  stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
#endif
  return f;
}

}  // namespace titan::rl::sandbox_detail
