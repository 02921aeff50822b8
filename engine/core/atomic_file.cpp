#include "engine/core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "engine/core/errors.h"

namespace gpulab {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, const std::string& why) {
  throw IOError("cannot write " + what + " '" + path + "': " + why);
}

// ".<name>.<pid>." : the temporaries of `name`, each carrying the pid of the process that wrote it.
std::string tempPrefix(const std::string& name) { return "." + name + "."; }

// Removes the temporaries of `name` in `dir` whose writer is gone (killed before its rename). Only
// this user's regular files, only where the pid in the name names no live process.
void removeAbandonedTemporaries(const std::filesystem::path& dir, const std::string& name) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = tempPrefix(name);
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) continue;
    // Exactly "<pid>.XXXXXX", mkstemp's six letters and digits: nothing else of the user's is touched
    // (".trace.json.99999.bak" is not a temporary; ".a.json.1.<pid>.XXXXXX" is another target's).
    const std::string rest = entry.substr(prefix.size());
    const std::size_t dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || rest.size() != dot + 7) continue;
    if (!std::all_of(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(dot), [](char c) { return c >= '0' && c <= '9'; })) continue;
    if (!std::all_of(rest.begin() + static_cast<std::ptrdiff_t>(dot) + 1, rest.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; })) continue;
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to ask)
    const std::string full = (dir / entry).string();
    struct stat st {};
    if (::lstat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) ::unlink(full.c_str());
  }
  ::closedir(d);
}

// The mode a new file gets: 0666 less the umask, as open() would give it. The umask is read from
// /proc (umask() would have to change it to read it, racing every other thread's file creation).
mode_t newFileMode() {
  mode_t mask = 022;
  if (FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      unsigned value = 0;
      if (std::sscanf(line, "Umask: %o", &value) == 1) {
        mask = static_cast<mode_t>(value);
        break;
      }
    }
    std::fclose(f);
  }
  return 0666 & ~mask;
}

}  // namespace

void writeFileAtomically(const std::string& path, std::string_view data, const std::string& what) {
  if (path.empty()) throw IOError("cannot write " + what + ": the path is empty");
  struct stat st {};
  mode_t mode = 0;
  if (::lstat(path.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;  // a file replaced keeps its mode (a learner's 0600 file stays private)
    if (S_ISLNK(st.st_mode)) fail(what, path, "it is a symbolic link (choose the file itself, or a new name)");
    if (S_ISDIR(st.st_mode)) fail(what, path, "it is a folder (add a file name)");
    if (!S_ISREG(st.st_mode)) fail(what, path, "it is not a regular file (a device, FIFO or socket); choose a new name");
  } else if (errno != ENOENT) {
    fail(what, path, std::generic_category().message(errno));
  } else {
    mode = newFileMode();
  }
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::string name = target.filename().string();
  removeAbandonedTemporaries(dir, name);
  std::string temp = (dir / (tempPrefix(name) + std::to_string(::getpid()) + ".XXXXXX")).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) fail(what, path, std::generic_category().message(errno));
  auto abandon = [&](int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    fail(what, path, std::generic_category().message(err));
  };
  std::size_t written = 0;
  while (written < data.size()) {
    const ssize_t n = ::write(fd, data.data() + written, data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) abandon(errno);
    written += static_cast<std::size_t>(n);
  }
  // mkstemp makes the file 0600: it gets the mode open() would have given it (or the old file's).
  if (::fchmod(fd, mode) != 0) abandon(errno);
  if (::fsync(fd) != 0) abandon(errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail(what, path, std::generic_category().message(err));
  }
  // rename() replaces the name, never what a link there would point at.
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail(what, path, std::generic_category().message(err));
  }
}

std::string userCacheFolder() {
  std::string base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && xdg[0] == '/') {
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    if (!home || home[0] != '/') {
      const passwd* pw = ::getpwuid(::geteuid());
      home = pw ? pw->pw_dir : nullptr;
    }
    if (!home) throw IOError("no folder for GPU Lab's files: neither XDG_CACHE_HOME nor HOME is set, and this user has no home folder");
    base = std::string(home) + "/.cache";
  }
  const std::string folder = base + "/gpulab";
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) {
    throw IOError("cannot create '" + folder + "': " + std::generic_category().message(errno));
  }
  struct stat st {};
  if (::lstat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    throw IOError("'" + folder + "' is not a folder of this user's: GPU Lab will not write there");
  }
  return folder;
}

}  // namespace gpulab
