// Host-side process bookkeeping of run_sandboxed: /proc scans (the sandbox's
// process tree and its resident memory) and per-sandbox cgroups.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "titan/rl/sandbox_impl.h"

namespace titan::rl::sandbox_detail {

namespace fs = std::filesystem;

std::vector<ProcInfo> scan_procs() {
  std::vector<ProcInfo> out;
  static const int64_t page = sysconf(_SC_PAGESIZE);
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in("/proc/" + name + "/stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream ss(line.substr(close + 2));
    // Fields after the command: 3 state, 4 ppid, ..., 20 num_threads, 22 starttime, 24 rss.
    std::string f[22];
    for (auto& x : f) ss >> x;
    if (!ss) continue;
    ProcInfo p;
    p.pid = static_cast<pid_t>(std::stol(name));
    p.state = f[0].empty() ? '?' : f[0][0];
    p.ppid = static_cast<pid_t>(std::stol(f[1]));
    p.threads = std::stoi(f[17]);
    p.start = std::stoull(f[19]);
    p.rss_bytes = std::stoll(f[21]) * page;
    struct stat st {};
    if (::stat(("/proc/" + name).c_str(), &st) == 0) p.uid = st.st_uid;
    out.push_back(p);
  }
  return out;
}

std::vector<ProcInfo> descendants(const std::vector<ProcInfo>& procs, pid_t root) {
  std::multimap<pid_t, const ProcInfo*> children;
  for (const ProcInfo& p : procs) children.emplace(p.ppid, &p);
  std::vector<ProcInfo> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t at = todo.back();
    todo.pop_back();
    auto [a, b] = children.equal_range(at);
    for (auto it = a; it != b; ++it) {
      out.push_back(*it->second);
      todo.push_back(it->second->pid);
    }
  }
  return out;
}

namespace {

bool write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return out.good();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Mount {
  std::string point, fstype, options;
};

std::vector<Mount> cgroup_mounts() {
  std::vector<Mount> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options ... - fstype source super-options
    std::istringstream ss(line);
    std::string id, parent, dev, root, point;
    ss >> id >> parent >> dev >> root >> point;
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream rest(line.substr(dash + 3));
    Mount m;
    std::string source;
    rest >> m.fstype >> source >> m.options;
    m.point = point;
    if (m.fstype == "cgroup" || m.fstype == "cgroup2") out.push_back(m);
  }
  return out;
}

// This process's cgroup path per hierarchy: "" key for v2, else the controller list.
std::map<std::string, std::string> own_cgroups() {
  std::map<std::string, std::string> out;
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    out[line.substr(a + 1, b - a - 1)] = line.substr(b + 1);
  }
  return out;
}

bool has_word(const std::string& list, const std::string& word, char sep) {
  std::istringstream ss(list);
  std::string w;
  while (std::getline(ss, w, sep))
    if (w == word) return true;
  return false;
}

}  // namespace

bool Cgroup::create(const std::string& name, int64_t memory_bytes, int max_pids) {
  const auto mounts = cgroup_mounts();
  const auto own = own_cgroups();
  // v2, delegated: the memory and pids controllers enabled for our children.
  for (const Mount& m : mounts) {
    if (m.fstype != "cgroup2" || !own.count("")) continue;
    const std::string parent = m.point + own.at("");
    const std::string sub = read_text(parent + "/cgroup.subtree_control");
    if (!has_word(sub, "memory", ' ') && sub.find("memory") == std::string::npos) continue;
    if (sub.find("pids") == std::string::npos) continue;
    const std::string dir = parent + "/" + name;
    if (mkdir(dir.c_str(), 0755) != 0) continue;
    dirs_.push_back(dir);
    if (!write_text(dir + "/memory.max", std::to_string(memory_bytes)) ||
        !write_text(dir + "/memory.swap.max", "0") || !write_text(dir + "/pids.max", std::to_string(max_pids))) {
      // memory.swap.max is absent without swap accounting: only the first and last matter.
      if (read_text(dir + "/memory.max").find(std::to_string(memory_bytes)) == std::string::npos ||
          read_text(dir + "/pids.max").find(std::to_string(max_pids)) == std::string::npos) {
        rmdir(dir.c_str());
        dirs_.clear();
        continue;
      }
    }
    procs_files_.push_back(dir + "/cgroup.procs");
    memory_dir_ = dir;
    v2_ = true;
    kind_ = "cgroup2";
    return true;
  }
  // v1: one directory in the memory hierarchy and one in the pids hierarchy.
  std::string mem_dir, pids_dir;
  for (const Mount& m : mounts) {
    if (m.fstype != "cgroup") continue;
    for (const char* ctl : {"memory", "pids"}) {
      if (!has_word(m.options, ctl, ',')) continue;
      std::string path;
      for (const auto& [ctls, p] : own)
        if (has_word(ctls, ctl, ',')) path = p;
      std::string& dir = std::strcmp(ctl, "memory") == 0 ? mem_dir : pids_dir;
      dir = m.point + (path == "/" ? "" : path) + "/" + name;
    }
  }
  if (mem_dir.empty() || pids_dir.empty()) return false;
  auto undo = [&] {
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) rmdir(it->c_str());
    dirs_.clear();
    procs_files_.clear();
    return false;
  };
  if (mkdir(mem_dir.c_str(), 0755) != 0) return false;
  dirs_.push_back(mem_dir);
  if (mkdir(pids_dir.c_str(), 0755) != 0) return undo();
  dirs_.push_back(pids_dir);
  if (!write_text(mem_dir + "/memory.limit_in_bytes", std::to_string(memory_bytes))) return undo();
  // With swap accounting, memory + swap too (absent otherwise).
  if (fs::exists(mem_dir + "/memory.memsw.limit_in_bytes"))
    write_text(mem_dir + "/memory.memsw.limit_in_bytes", std::to_string(memory_bytes));
  if (!write_text(pids_dir + "/pids.max", std::to_string(max_pids))) return undo();
  procs_files_ = {mem_dir + "/cgroup.procs", pids_dir + "/cgroup.procs"};
  memory_dir_ = mem_dir;
  kind_ = "cgroup1";
  return true;
}

void Cgroup::kill_all() {
  if (dirs_.empty()) return;
  if (v2_ && write_text(dirs_[0] + "/cgroup.kill", "1")) {
    for (int i = 0; i < 1000 && !read_text(dirs_[0] + "/cgroup.procs").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return;
  }
  // v1: kill what is listed until nothing is (pids.max bounds what can appear
  // between two passes).
  for (int pass = 0; pass < 1000; ++pass) {
    bool any = false;
    for (const std::string& f : procs_files_) {
      std::istringstream ss(read_text(f));
      long pid;
      while (ss >> pid) {
        any = true;
        kill(static_cast<pid_t>(pid), SIGKILL);
      }
    }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool Cgroup::oom_killed() const {
  if (memory_dir_.empty()) return false;
  const std::string text = read_text(memory_dir_ + (v2_ ? "/memory.events" : "/memory.oom_control"));
  std::istringstream ss(text);
  std::string key;
  long long value = 0;
  while (ss >> key >> value)
    if (key == "oom_kill" && value > 0) return true;
  return false;
}

Cgroup::~Cgroup() {
  // A cgroup can be removed once its last process is gone (zombies included).
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it)
    for (int i = 0; i < 500 && rmdir(it->c_str()) != 0 && errno == EBUSY; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

}  // namespace titan::rl::sandbox_detail
