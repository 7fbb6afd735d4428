// Files: the one atomic writer and the bounded readers every tool uses.
//
// Writing: bytes go to a temporary file beside the target (same directory, so the rename is atomic),
// which is fsynced, renamed over the target, and the directory fsynced; on every failure path the
// temporary is removed. The target must be a new path or an existing regular file: a directory, a
// device (/dev/null), a FIFO or a symbolic link is refused with InputError before anything is written
// (a rename would replace the link or the device node by a file).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace manyadd {

// Throws InputError when `path` cannot be an output of an atomic write (see above) or its directory
// does not exist. Tools call it while validating options, before any work.
void check_output_path(const std::string& path);

// A file written atomically: append(), then commit(). Destroyed without commit(), the temporary is
// removed and the target is untouched. Errors are InputError with the OS message (a full disk, a
// read-only directory: things a user can correct).
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void append(const void* data, std::size_t bytes);
  void append(const std::string& s) { append(s.data(), s.size()); }
  // Overwrites already-appended bytes at `offset` (e.g. a header field known only at the end).
  void patch(std::uint64_t offset, const void* data, std::size_t bytes);
  std::uint64_t size() const { return size_; }
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  [[noreturn]] void fail(const char* what, int err);
};

void atomic_write(const std::string& path, const std::string& bytes);

// InputError when `dir` cannot name a directory here: a name in it over 255 bytes, or 4096 bytes or more
// in all (a tool checks its --out with it before it starts).
void check_output_dir_name(const std::string& dir);

// Creates an output directory (and its parents); InputError with the OS message when it cannot be (a
// file in the way, no permission): the user's to correct. A name check_output_dir_name refuses is
// refused before anything is created.
void make_output_dir(const std::string& dir);

// Whole file into memory; InputError when it cannot be read, is not a regular file (a FIFO would block
// the reader forever; a device may never end) or exceeds max_bytes (checked before reading, so a huge
// file is refused without allocating it).
std::string read_file(const std::string& path, std::uint64_t max_bytes = std::uint64_t(1) << 34);
// JSON text parsed strictly: a key twice in one object is refused (nlohmann's parser would keep the
// last), as are NaN/Infinity literals and numbers beyond double. Syntax errors throw nlohmann's
// exceptions, a repeated key InputError("the key 'K' appears twice in one object").
nlohmann::json parse_json_unique(const char* begin, const char* end);
// The same with every error an InputError "'what' is not valid JSON: ...".
nlohmann::json parse_json(const std::string& text, const std::string& what);
// A JSON file (at most 64 MiB): parse_json of its text, named by its path.
nlohmann::json read_json_file(const std::string& path);

}  // namespace manyadd
