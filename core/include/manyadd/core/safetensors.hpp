// safetensors, the format PyTorch's `safetensors.torch.load_file` reads: 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {string: string}}, then the
// tensors' bytes, row-major, little-endian. The project's one reader and one writer, for every dtype
// the project stores (F64 constructed weights, F32 learned weights and moments, BF16, integer batches).
//
// Every file written carries metadata "checksum": "fnv1a64:" and 16 lowercase hex digits, the standard
// FNV-1a 64 (offset basis 14695981039346656037, prime 1099511628211) of the whole file -- length
// prefix, header and data -- with those 16 digits read as sixteen '0' characters. Every byte a reader
// depends on is under it: names, dtypes, shapes, offsets, metadata (a checkpoint's step) and data. The
// header holds the text "checksum":"fnv1a64: exactly once (the writers emit compact JSON), which is how
// a reader finds the digits. Legacy files, written before the checksum covered the header, carry 16
// hex digits alone: the project's earlier FNV-1a variant (offset basis 1469598103934665603, a digit
// short of the standard) of the data section only. They are read where ReadOptions allows them (the
// default: the committed models under models/ are such files), never for a checkpoint, whose step
// they would leave unprotected.
//
// The reader validates everything before it allocates a tensor: header size and JSON (no key twice in
// one object), known dtypes, integer shapes whose element and byte counts do not overflow, offsets
// that are aligned, sorted, non-overlapping and cover the data section exactly, the checksum, and
// (unless allowed) finite floating-point values. Every problem is an InputError naming the file and
// the tensor. python/manyadd/safetensors.py is the Python twin (same checks, byte-identical files;
// tests/data/safetensors_cases.json holds the cases both are tested on).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace manyadd {

enum class DType : std::uint8_t { F64, F32, BF16, F16, I64, I32, I16, I8, U8, BOOL };
std::size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "F32", ...
DType parse_dtype(const std::string& s);  // InputError for names outside the list above
bool dtype_is_float(DType t);

// bf16 <-> float: round to nearest even (NaN kept NaN); widening is exact.
std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t b);

// FNV-1a 64 of n bytes continuing from state h (the standard offset basis by default).
inline constexpr std::uint64_t kFnv1a64Offset = 14695981039346656037ull;
inline constexpr std::uint64_t kFnv1a64LegacyOffset = 1469598103934665603ull;  // legacy checksums only
std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = kFnv1a64Offset);

// A tensor as stored: its bytes in the stored dtype.
struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;  // numel() * dtype_size(dtype)
  std::int64_t numel() const;
  // The values converted (exactly for every dtype narrower than the target; F64 -> float rounds).
  std::vector<float> to_f32() const;
  std::vector<double> to_f64() const;
  template <class T>
  std::vector<T> values() const;  // T in {float, double, std::int32_t, std::uint8_t}; integer dtypes only for integer T
};

// Builds a tensor from values, converting them to `dtype` (BF16/F16 by round to nearest even).
// InvariantError when shape does not hold values.size() elements.
template <class T>
Tensor make_tensor(std::string name, std::vector<std::int64_t> shape, const std::vector<T>& values, DType dtype);
inline Tensor make_tensor(std::string name, std::vector<std::int64_t> shape, const std::vector<float>& v) {
  return make_tensor(std::move(name), std::move(shape), v, DType::F32);
}

struct SafetensorsFile {
  std::vector<Tensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  std::string path;             // for messages
  bool legacy_checksum = false; // the checksum was the legacy one (data only; see above)
  const Tensor* find(const std::string& name) const;
  const Tensor& get(const std::string& name) const;  // InputError naming the file when missing
};

struct ReadOptions {
  bool require_checksum = true;    // files from other writers have none: pass false for them
  bool allow_nonfinite = false;    // NaN / Inf in a floating tensor is refused unless set
  std::uint64_t max_bytes = std::uint64_t(1) << 36;
  bool allow_legacy_checksum = true;  // false: a legacy checksum (data only) is refused
};
SafetensorsFile read_safetensors(const std::string& path, const ReadOptions& opt = {});
// The same from bytes in memory; `what` names them in messages.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what, const ReadOptions& opt = {});

// The bytes of a file (checksum added to the metadata; "checksum" may not be given). A tensor order
// that would leave a tensor's data misaligned (a 1-byte tensor of odd size before an F32 one) is an
// InvariantError: readers refuse such files. Order tensors by element size, largest first.
std::string safetensors_bytes(const std::vector<Tensor>& ts, std::map<std::string, std::string> meta);
// Atomic write (files.hpp rules: the target must be new or a regular file).
void write_safetensors(const std::string& path, const std::vector<Tensor>& ts,
                       const std::map<std::string, std::string>& meta);

// Streaming writer for tensors too large to hold at once: declare them, then write their bytes in
// order (any chunking), then commit(); the checksum is computed on the way and patched into the
// header. Destroyed before commit(), nothing is left behind.
struct TensorDecl {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
};
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorDecl> tensors, std::map<std::string, std::string> meta);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  void write(const void* data, std::size_t bytes);
  void commit();

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace manyadd
