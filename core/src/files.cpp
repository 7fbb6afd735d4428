// Atomic writes and bounded reads: see files.hpp.
#include "manyadd/core/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/error.hpp"

namespace manyadd {

namespace {
std::string dir_of(const std::string& path) {
  const auto k = path.find_last_of('/');
  return k == std::string::npos ? std::string(".") : (k == 0 ? std::string("/") : path.substr(0, k));
}
}  // namespace

void check_output_path(const std::string& path) {
  if (path.empty()) throw InputError("an output path is empty");
  if (path.back() == '/') throw InputError(fmt::format("output '{}' names a directory, not a file", path));
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      throw InputError(fmt::format("output '{}' is a symbolic link: refusing to replace it (give the target's path)", path));
    if (S_ISDIR(st.st_mode)) throw InputError(fmt::format("output '{}' is a directory, not a file", path));
    if (!S_ISREG(st.st_mode))
      throw InputError(fmt::format("output '{}' exists and is not a regular file (a device or FIFO): refusing to replace it",
                                   path));
  } else if (errno != ENOENT) {
    throw InputError(fmt::format("output '{}': {}", path, std::strerror(errno)));
  }
  const std::string dir = dir_of(path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0 || !S_ISDIR(ds.st_mode))
    throw InputError(fmt::format("output '{}': directory '{}' does not exist", path, dir));
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  check_output_path(path);
  tmp_ = fmt::format("{}.tmp.{}", path, ::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) fail("create", errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(const char* what, int err) {
  if (fd_ >= 0) ::close(fd_), fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str()), tmp_.clear();
  throw InputError(fmt::format("cannot write '{}': {} failed: {}", path_, what, std::strerror(err)));
}

void AtomicFile::append(const void* data, std::size_t bytes) {
  if (fd_ < 0) throw InvariantError(fmt::format("AtomicFile '{}': append after commit or failure", path_));
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t k = ::write(fd_, p + done, bytes - done);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    done += std::size_t(k);
  }
  size_ += bytes;
}

void AtomicFile::patch(std::uint64_t offset, const void* data, std::size_t bytes) {
  if (fd_ < 0 || offset + bytes > size_) throw InvariantError(fmt::format("AtomicFile '{}': bad patch", path_));
  const char* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t k = ::pwrite(fd_, p + done, bytes - done, off_t(offset + done));
    if (k < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    done += std::size_t(k);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) throw InvariantError(fmt::format("AtomicFile '{}': commit twice", path_));
  if (::fsync(fd_) != 0) fail("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close", errno);
  // The target may have changed since the constructor checked it: check again right before renaming.
  check_output_path(path_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename", errno);
  tmp_.clear();
  const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // best effort: some file systems refuse fsync on directories
    ::fsync(dfd);
    ::close(dfd);
  }
}

void atomic_write(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.append(bytes);
  f.commit();
}

void check_output_dir_name(const std::string& dir) {
  constexpr std::size_t kNameMax = 255, kPathMax = 4096;
  if (dir.size() >= kPathMax)
    throw InputError(fmt::format("cannot create the directory '{}...': {} bytes, a path has fewer than {}",
                                 dir.substr(0, 60), dir.size(), kPathMax));
  for (std::size_t b = 0; b <= dir.size();) {
    const std::size_t e = std::min(dir.find('/', b), dir.size());
    if (e - b > kNameMax)
      throw InputError(fmt::format("cannot create the directory '{}': file name too long ('{}...' has {} bytes, more "
                                   "than the {} a name may have)", dir.size() > 120 ? dir.substr(0, 120) + "..." : dir,
                                   dir.substr(b, 20), e - b, kNameMax));
    b = e + 1;
  }
}

void make_output_dir(const std::string& dir) {
  check_output_dir_name(dir);  // before any parent is created (nothing left behind)
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec))
    throw InputError(fmt::format("cannot create the directory '{}': {}", dir, ec ? ec.message() : "not a directory"));
}

std::string read_file(const std::string& path, std::uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO does not wait for a writer (it would block forever); the type is checked on
  // the opened descriptor, so a path swapped after a check cannot slip through.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw InputError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw InputError(fmt::format("'{}' is a directory, not a file", path));
  if (!S_ISREG(st.st_mode))
    throw InputError(fmt::format("'{}' is not a regular file (a FIFO, socket or device): readers take regular files only",
                                 path));
  if (std::uint64_t(st.st_size) > max_bytes)
    throw InputError(fmt::format("'{}' has {} bytes, more than the {} this reader accepts", path, st.st_size, max_bytes));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  std::string out;
  out.reserve(std::size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {  // to the end, even if the file grew since fstat: bounded by max_bytes
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    if (n == 0) break;
    out.append(buf, std::size_t(n));
    if (out.size() > max_bytes)
      throw InputError(fmt::format("'{}' is longer than the {} bytes this reader accepts", path, max_bytes));
  }
  return out;
}

nlohmann::json parse_json_unique(const char* begin, const char* end) {
  std::vector<std::set<std::string>> keys;  // the keys seen in each enclosing object
  const auto no_repeats = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) keys.emplace_back();
    if (ev == E::object_end && !keys.empty()) keys.pop_back();
    if (ev == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
      throw InputError(fmt::format("the key '{}' appears twice in one object", parsed.get<std::string>()));
    return true;
  };
  return nlohmann::json::parse(begin, end, no_repeats);
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return parse_json_unique(text.data(), text.data() + text.size());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}' is not valid JSON: {}", what, e.what()));
  } catch (const InputError& e) {
    throw InputError(fmt::format("'{}' is not valid JSON: {}", what, e.what()));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json(read_file(path, std::uint64_t(64) << 20), path);
}

}  // namespace manyadd
