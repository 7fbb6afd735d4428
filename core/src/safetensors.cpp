// The safetensors reader and writer: see safetensors.hpp.
#include "manyadd/core/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"

namespace manyadd {

namespace {
using ojson = nlohmann::ordered_json;

struct DTypeInfo {
  DType t;
  const char* name;
  std::size_t size;
  bool is_float;
};
constexpr DTypeInfo kDTypes[] = {{DType::F64, "F64", 8, true},  {DType::F32, "F32", 4, true},
                                 {DType::BF16, "BF16", 2, true}, {DType::F16, "F16", 2, true},
                                 {DType::I64, "I64", 8, false}, {DType::I32, "I32", 4, false},
                                 {DType::I16, "I16", 2, false}, {DType::I8, "I8", 1, false},
                                 {DType::U8, "U8", 1, false},   {DType::BOOL, "BOOL", 1, false}};
const DTypeInfo& info(DType t) {
  for (const auto& d : kDTypes)
    if (d.t == t) return d;
  throw InvariantError("unknown dtype enumerator");
}

constexpr std::uint64_t kMaxHeader = std::uint64_t(100) << 20;  // as the reference implementation
// The checksum's digits follow this text, which the header holds exactly once (safetensors.hpp).
const char kChecksumAt[] = "\"checksum\":\"fnv1a64:";
const char kChecksumPrefix[] = "fnv1a64:";

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  std::uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      const float v = std::ldexp(float(man), -24);
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
std::uint16_t float_to_f16(float x) {
  // Through double arithmetic: exact rounding to nearest even for normal and subnormal halves.
  if (std::isnan(x)) return 0x7e00;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(double(x));
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0, -14)) {  // subnormal or zero: units of 2^-24
    const double q = std::nearbyint(a * std::ldexp(1.0, 24));
    return std::uint16_t(sign | std::uint16_t(q));
  }
  int e;
  const double fr = std::frexp(a, &e);  // a = fr 2^e, fr in [0.5, 1)
  double man = std::nearbyint((fr * 2 - 1) * 1024);  // 10 fraction bits
  int exp = e - 1 + 15;
  if (man >= 1024) man = 0, ++exp;
  if (exp >= 31) return sign | 0x7c00;
  return std::uint16_t(sign | (exp << 10) | int(man));
}

template <class T>
T load_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the project builds on little-endian hosts only (checked below)
  return v;
}
static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE single and double required");

double element_as_double(DType t, const unsigned char* p) {
  switch (t) {
    case DType::F64: return load_le<double>(p);
    case DType::F32: return double(load_le<float>(p));
    case DType::BF16: return double(bf16_to_float(load_le<std::uint16_t>(p)));
    case DType::F16: return double(f16_to_float(load_le<std::uint16_t>(p)));
    case DType::I64: return double(load_le<std::int64_t>(p));
    case DType::I32: return double(load_le<std::int32_t>(p));
    case DType::I16: return double(load_le<std::int16_t>(p));
    case DType::I8: return double(load_le<std::int8_t>(p));
    case DType::U8: return double(*p);
    case DType::BOOL: return *p ? 1.0 : 0.0;
  }
  throw InvariantError("unknown dtype enumerator");
}

// Element count of a shape, or -1 when it (or its byte count at `esize`) exceeds 2^62.
std::int64_t checked_numel(const std::vector<std::int64_t>& shape, std::size_t esize) {
  const std::uint64_t lim = std::uint64_t(1) << 62;
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > lim / std::uint64_t(d)) return -1;
    n *= std::uint64_t(d);
  }
  if (esize && n > lim / esize) return -1;
  return std::int64_t(n);
}
}  // namespace

std::size_t dtype_size(DType t) { return info(t).size; }
const char* dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) { return info(t).is_float; }
DType parse_dtype(const std::string& s) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.t;
  throw InputError(fmt::format("dtype '{}' is not one of F64 F32 BF16 F16 I64 I32 I16 I8 U8 BOOL", s));
}

std::uint16_t float_to_bf16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  if (std::isnan(x)) return std::uint16_t((b >> 16) | 0x40);  // quiet NaN, sign kept
  b += 0x7fff + ((b >> 16) & 1);  // round to nearest, ties to even
  return std::uint16_t(b >> 16);
}
float bf16_to_float(std::uint16_t h) {
  const std::uint32_t b = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

namespace {
bool is_hex16(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// The stored checksum against the file's bytes: the whole-file rule or (when allowed) the legacy rule.
template <class Bad>
void check_checksum(const std::string& b, std::size_t data0, const std::string& stored, const ReadOptions& opt,
                    const Bad& bad, bool* legacy) {
  std::string got;
  const std::size_t plen = std::strlen(kChecksumPrefix);
  if (stored.compare(0, plen, kChecksumPrefix) == 0 && is_hex16(stored.substr(plen))) {
    const std::string_view header(b.data() + 8, data0 - 8);
    const std::size_t k = header.find(kChecksumAt), at = 8 + k + std::strlen(kChecksumAt);
    if (k == std::string_view::npos || header.find(kChecksumAt, k + 1) != std::string_view::npos ||
        at + 16 > data0 || b.compare(at, 16, stored, plen, 16) != 0)
      throw bad(fmt::format("the checksum is not written as \"checksum\":\"{}<16 hex digits>\" once in the header",
                            kChecksumPrefix));
    std::uint64_t h = fnv1a64(b.data(), at);
    h = fnv1a64("0000000000000000", 16, h);
    got = fmt::format("{}{:016x}", kChecksumPrefix, fnv1a64(b.data() + at + 16, b.size() - at - 16, h));
  } else if (is_hex16(stored)) {
    if (!opt.allow_legacy_checksum)
      throw bad("legacy checksum (of the data alone: the metadata and shapes are not under it) where the whole "
                "file must be checksummed");
    *legacy = true;
    got = fmt::format("{:016x}", fnv1a64(b.data() + data0, b.size() - data0, kFnv1a64LegacyOffset));
  } else {
    throw bad(fmt::format("checksum '{}' is neither {}<16 hex digits> nor a legacy 16-digit checksum", stored,
                          kChecksumPrefix));
  }
  if (got != stored)
    throw bad(fmt::format("checksum mismatch (stored {}, computed {}): corrupted or truncated", stored, got));
}
}  // namespace

std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::int64_t Tensor::numel() const { return checked_numel(shape, 0); }

std::vector<double> Tensor::to_f64() const {
  const std::size_t es = dtype_size(dtype), n = bytes.size() / es;
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = element_as_double(dtype, bytes.data() + i * es);
  return out;
}
std::vector<float> Tensor::to_f32() const {
  const std::size_t es = dtype_size(dtype), n = bytes.size() / es;
  std::vector<float> out(n);
  if (dtype == DType::F32) {
    if (n) std::memcpy(out.data(), bytes.data(), n * 4);
    return out;
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = float(element_as_double(dtype, bytes.data() + i * es));
  return out;
}
template <class T>
std::vector<T> Tensor::values() const {
  if constexpr (std::is_same_v<T, float>) {
    return to_f32();
  } else if constexpr (std::is_same_v<T, double>) {
    return to_f64();
  } else {
    if (dtype_is_float(dtype))
      throw InputError(fmt::format("tensor '{}' is {} where integers are expected", name, dtype_name(dtype)));
    const std::size_t es = dtype_size(dtype), n = bytes.size() / es;
    std::vector<T> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = element_as_double(dtype, bytes.data() + i * es);
      if (v < double(std::numeric_limits<T>::min()) || v > double(std::numeric_limits<T>::max()))
        throw InputError(fmt::format("tensor '{}': value {} does not fit the reader's integer type", name, v));
      out[i] = T(v);
    }
    return out;
  }
}
template std::vector<float> Tensor::values<float>() const;
template std::vector<double> Tensor::values<double>() const;
template std::vector<std::int32_t> Tensor::values<std::int32_t>() const;
template std::vector<std::uint8_t> Tensor::values<std::uint8_t>() const;

template <class T>
Tensor make_tensor(std::string name, std::vector<std::int64_t> shape, const std::vector<T>& v, DType dtype) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  const std::int64_t n = checked_numel(t.shape, dtype_size(dtype));
  if (n < 0 || std::uint64_t(n) != v.size())
    throw InvariantError(fmt::format("tensor '{}': shape [{}] does not hold {} values", t.name, fmt::join(t.shape, ", "),
                                     v.size()));
  const std::size_t es = dtype_size(dtype);
  t.bytes.resize(v.size() * es);
  unsigned char* o = t.bytes.data();
  for (std::size_t i = 0; i < v.size(); ++i, o += es) {
    const double x = double(v[i]);
    switch (dtype) {
      case DType::F64: std::memcpy(o, &x, 8); break;
      case DType::F32: { const float f = float(v[i]); std::memcpy(o, &f, 4); break; }
      case DType::BF16: { const auto h = float_to_bf16(float(v[i])); std::memcpy(o, &h, 2); break; }
      case DType::F16: { const auto h = float_to_f16(float(v[i])); std::memcpy(o, &h, 2); break; }
      case DType::I64: { const auto k = std::int64_t(x); std::memcpy(o, &k, 8); break; }
      case DType::I32: { const auto k = std::int32_t(x); std::memcpy(o, &k, 4); break; }
      case DType::I16: { const auto k = std::int16_t(x); std::memcpy(o, &k, 2); break; }
      case DType::I8: { const auto k = std::int8_t(x); std::memcpy(o, &k, 1); break; }
      case DType::U8: { const auto k = std::uint8_t(x); std::memcpy(o, &k, 1); break; }
      case DType::BOOL: { const std::uint8_t k = x != 0; std::memcpy(o, &k, 1); break; }
    }
  }
  return t;
}
template Tensor make_tensor<float>(std::string, std::vector<std::int64_t>, const std::vector<float>&, DType);
template Tensor make_tensor<double>(std::string, std::vector<std::int64_t>, const std::vector<double>&, DType);
template Tensor make_tensor<std::int32_t>(std::string, std::vector<std::int64_t>, const std::vector<std::int32_t>&, DType);
template Tensor make_tensor<std::uint8_t>(std::string, std::vector<std::int64_t>, const std::vector<std::uint8_t>&, DType);

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}
const Tensor& SafetensorsFile::get(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  throw InputError(fmt::format("'{}': tensor '{}' is missing", path, name));
}

SafetensorsFile parse_safetensors(const std::string& b, const std::string& what, const ReadOptions& opt) {
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("'{}' is not a valid safetensors file: {}", what, why));
  };
  if (b.size() < 8) throw bad(fmt::format("only {} bytes (truncated)", b.size()));
  const std::uint64_t hl = load_le<std::uint64_t>(reinterpret_cast<const unsigned char*>(b.data()));
  if (hl > kMaxHeader) throw bad(fmt::format("header length {} exceeds {} bytes", hl, kMaxHeader));
  if (hl > b.size() - 8) throw bad(fmt::format("header claims {} bytes, file has {} (truncated)", hl, b.size()));
  nlohmann::json header;
  try {
    header = parse_json_unique(b.data() + 8, b.data() + 8 + hl);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not JSON: ") + e.what());
  } catch (const InputError& e) {  // a repeated key
    throw bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  const std::size_t data0 = 8 + std::size_t(hl), dsize = b.size() - data0;
  SafetensorsFile f;
  f.path = what;
  if (header.contains("__metadata__")) {
    const auto& m = header["__metadata__"];
    if (!m.is_object()) throw bad("__metadata__ is not an object");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string()) throw bad(fmt::format("__metadata__ value '{}' is not a string", it.key()));
      f.metadata[it.key()] = it.value().get<std::string>();
    }
  }
  // Every entry checked before any tensor is allocated.
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t begin, end;
  };
  std::vector<Entry> es;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const auto& e = it.value();
    auto tbad = [&](const std::string& why) { return bad(fmt::format("tensor '{}': {}", name, why)); };
    if (!e.is_object()) throw tbad("entry is not an object");
    for (auto k = e.begin(); k != e.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        throw tbad(fmt::format("unknown field '{}'", k.key()));
    if (!e.contains("dtype") || !e["dtype"].is_string()) throw tbad("dtype missing or not a string");
    Entry en;
    en.name = name;
    try {
      en.dtype = parse_dtype(e["dtype"].get<std::string>());
    } catch (const InputError& x) {
      throw tbad(x.what());
    }
    if (!e.contains("shape") || !e["shape"].is_array()) throw tbad("shape missing or not an array");
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0))
        throw tbad(fmt::format("shape entry {} is not a non-negative integer", d.dump()));
      if (d.get<std::uint64_t>() > (std::uint64_t(1) << 62)) throw tbad(fmt::format("shape entry {} is too large", d.dump()));
      en.shape.push_back(d.get<std::int64_t>());
    }
    const std::size_t esize = dtype_size(en.dtype);
    const std::int64_t n = checked_numel(en.shape, esize);
    if (n < 0) throw tbad(fmt::format("shape [{}] has too many elements", fmt::join(en.shape, ", ")));
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
        !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
      throw tbad("data_offsets must be two non-negative integers");
    en.begin = e["data_offsets"][0].get<std::uint64_t>();
    en.end = e["data_offsets"][1].get<std::uint64_t>();
    if (en.begin > en.end || en.end > dsize)
      throw tbad(fmt::format("data_offsets [{}, {}] outside the {} data bytes", en.begin, en.end, dsize));
    if (en.end - en.begin != std::uint64_t(n) * esize)
      throw tbad(fmt::format("data_offsets span {} bytes, shape [{}] of {} needs {}", en.end - en.begin,
                             fmt::join(en.shape, ", "), dtype_name(en.dtype), std::uint64_t(n) * esize));
    if (en.begin % esize) throw tbad(fmt::format("data offset {} is not aligned to {} bytes", en.begin, esize));
    es.push_back(std::move(en));
  }
  std::sort(es.begin(), es.end(), [](const Entry& a, const Entry& c) {
    return a.begin != c.begin ? a.begin < c.begin : a.end < c.end;
  });
  std::uint64_t at = 0;
  for (const auto& en : es) {
    if (en.begin != at)
      throw bad(en.begin < at ? fmt::format("tensor '{}' overlaps the tensor before it", en.name)
                              : fmt::format("{} bytes before tensor '{}' belong to no tensor", en.begin - at, en.name));
    at = en.end;
  }
  if (at != dsize) throw bad(fmt::format("{} trailing data bytes belong to no tensor", dsize - at));
  const auto cs = f.metadata.find("checksum");
  if (cs == f.metadata.end()) {
    if (opt.require_checksum) throw bad("no checksum in the metadata");
  } else {
    check_checksum(b, data0, cs->second, opt, bad, &f.legacy_checksum);
  }
  f.tensors.reserve(es.size());
  for (auto& en : es) {
    Tensor t;
    t.name = std::move(en.name);
    t.dtype = en.dtype;
    t.shape = std::move(en.shape);
    t.bytes.assign(b.begin() + std::ptrdiff_t(data0 + en.begin), b.begin() + std::ptrdiff_t(data0 + en.end));
    if (!opt.allow_nonfinite && dtype_is_float(t.dtype)) {
      const std::size_t esz = dtype_size(t.dtype), cnt = t.bytes.size() / esz;
      for (std::size_t i = 0; i < cnt; ++i)
        if (!std::isfinite(element_as_double(t.dtype, t.bytes.data() + i * esz)))
          throw bad(fmt::format("tensor '{}': element {} is not finite", t.name, i));
    }
    f.tensors.push_back(std::move(t));
  }
  return f;
}

SafetensorsFile read_safetensors(const std::string& path, const ReadOptions& opt) {
  return parse_safetensors(read_file(path, opt.max_bytes), path, opt);
}

namespace {
// Header bytes (padded with spaces to a multiple of 8 so the data starts aligned) with a placeholder
// checksum; returns the offset of the checksum's 16 hex digits inside the header.
std::string header_bytes(const std::vector<TensorDecl>& ds, std::map<std::string, std::string> meta, std::size_t* cs_at,
                         std::uint64_t* data_bytes) {
  if (meta.count("checksum")) throw InvariantError("metadata key 'checksum' is reserved for the writer");
  meta["checksum"] = std::string(kChecksumPrefix) + std::string(16, '0');  // the digits are patched in later
  ojson header = ojson::object();
  header["__metadata__"] = meta;
  std::uint64_t off = 0;
  for (const auto& d : ds) {
    if (d.name == "__metadata__" || header.contains(d.name))
      throw InvariantError(fmt::format("tensor name '{}' is reserved or repeated", d.name));
    const std::int64_t n = checked_numel(d.shape, dtype_size(d.dtype));
    if (n < 0) throw InvariantError(fmt::format("tensor '{}' is too large", d.name));
    const std::uint64_t bytes = std::uint64_t(n) * dtype_size(d.dtype);
    if (off % dtype_size(d.dtype))  // readers refuse such a file: order the tensors by element size, largest first
      throw InvariantError(fmt::format("tensor '{}' ({}) would start at data offset {}, not aligned to {} bytes", d.name,
                                       dtype_name(d.dtype), off, dtype_size(d.dtype)));
    header[d.name] = {{"dtype", dtype_name(d.dtype)}, {"shape", d.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  const auto k = h.find(kChecksumAt);
  if (k == std::string::npos || h.find(kChecksumAt, k + 1) != std::string::npos)
    throw InvariantError("checksum placeholder not unique in the header");
  *cs_at = 8 + k + std::strlen(kChecksumAt);
  *data_bytes = off;
  std::string out(8, '\0');
  const std::uint64_t hl = h.size();
  std::memcpy(out.data(), &hl, 8);
  return out + h;
}
std::vector<TensorDecl> decls_of(const std::vector<Tensor>& ts) {
  std::vector<TensorDecl> ds;
  for (const auto& t : ts) {
    const std::int64_t n = checked_numel(t.shape, dtype_size(t.dtype));
    if (n < 0 || std::uint64_t(n) * dtype_size(t.dtype) != t.bytes.size())
      throw InvariantError(fmt::format("tensor '{}': shape and bytes disagree", t.name));
    ds.push_back({t.name, t.dtype, t.shape});
  }
  return ds;
}
}  // namespace

std::string safetensors_bytes(const std::vector<Tensor>& ts, std::map<std::string, std::string> meta) {
  std::size_t cs_at;
  std::uint64_t dbytes;
  std::string out = header_bytes(decls_of(ts), std::move(meta), &cs_at, &dbytes);
  for (const auto& t : ts) out.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  out.replace(cs_at, 16, fmt::format("{:016x}", fnv1a64(out.data(), out.size())));
  return out;
}

void write_safetensors(const std::string& path, const std::vector<Tensor>& ts, const std::map<std::string, std::string>& meta) {
  atomic_write(path, safetensors_bytes(ts, meta));
}

struct SafetensorsWriter::Impl {
  AtomicFile file;
  std::size_t cs_at = 0;
  std::uint64_t data_bytes = 0, written = 0, hash = kFnv1a64Offset;
  explicit Impl(const std::string& p) : file(p) {}
};

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorDecl> ts,
                                     std::map<std::string, std::string> meta)
    : impl_(new Impl(path)) {
  try {
    const std::string header = header_bytes(ts, std::move(meta), &impl_->cs_at, &impl_->data_bytes);
    impl_->hash = fnv1a64(header.data(), header.size());  // the digits are still '0' here, as the rule reads them
    impl_->file.append(header);
  } catch (...) {
    delete impl_;
    throw;
  }
}
SafetensorsWriter::~SafetensorsWriter() { delete impl_; }

void SafetensorsWriter::write(const void* data, std::size_t bytes) {
  if (impl_->written + bytes > impl_->data_bytes)
    throw InvariantError(fmt::format("'{}': more data than the declared tensors hold", impl_->file.path()));
  impl_->hash = fnv1a64(data, bytes, impl_->hash);
  impl_->file.append(data, bytes);
  impl_->written += bytes;
}

void SafetensorsWriter::commit() {
  if (impl_->written != impl_->data_bytes)
    throw InvariantError(fmt::format("'{}': {} of {} data bytes written", impl_->file.path(), impl_->written,
                                     impl_->data_bytes));
  const std::string sum = fmt::format("{:016x}", impl_->hash);
  impl_->file.patch(impl_->cs_at, sum.data(), 16);
  impl_->file.commit();
}

}  // namespace manyadd
