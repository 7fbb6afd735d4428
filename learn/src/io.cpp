// Files of learn/: see io.hpp.
#include "manyadd/learn/io.hpp"

#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <png.h>
#include <unistd.h>

#include <fmt/format.h>

namespace manyadd::learn {

namespace {
std::runtime_error os_error(const std::string& what, const std::string& path) {
  return std::runtime_error(fmt::format("{} '{}': {}", what, path, std::strerror(errno)));
}
std::string dir_of(const std::string& path) {
  const auto k = path.find_last_of('/');
  return k == std::string::npos ? std::string(".") : (k == 0 ? std::string("/") : path.substr(0, k));
}
}  // namespace

void atomic_write(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw os_error("cannot create", tmp);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t k = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (k < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      throw os_error("cannot write", tmp);
    }
    done += std::size_t(k);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    throw os_error("cannot fsync", tmp);
  }
  if (::close(fd) != 0) throw os_error("cannot close", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw os_error("cannot rename onto", path);
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: the rename is durable once the directory is synced
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("cannot open '{}'", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string safetensors_bytes(const std::vector<NamedTensor>& ts, std::map<std::string, std::string> meta) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (auto& t : ts) {
    std::int64_t n = 1;
    for (auto d : t.shape) n *= d;
    if (n != std::int64_t(t.data.size()))
      throw std::logic_error(fmt::format("tensor {}: shape holds {} values, data {}", t.name, n, t.data.size()));
    const std::size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  meta["checksum"] = fmt::format("{:016x}", fnv1a64(data.data(), data.size()));
  header["__metadata__"] = meta;
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::string out(8, '\0');
  const std::uint64_t hl = h.size();
  for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((hl >> (8 * i)) & 0xff);  // little endian
  out += h;
  out += data;
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& ts,
                       const std::map<std::string, std::string>& meta) {
  atomic_write(path, safetensors_bytes(ts, meta));
}

std::vector<NamedTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* meta) {
  const std::string b = read_file(path);
  auto bad = [&](const std::string& why) {
    return InputError(fmt::format("'{}' is not a valid checkpoint/safetensors file: {}", path, why));
  };
  if (b.size() < 8) throw bad(fmt::format("only {} bytes (truncated)", b.size()));
  std::uint64_t hl = 0;
  for (int i = 0; i < 8; ++i) hl |= std::uint64_t(static_cast<unsigned char>(b[std::size_t(i)])) << (8 * i);
  if (hl > b.size() - 8) throw bad(fmt::format("header claims {} bytes, file has {} (truncated)", hl, b.size()));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + std::ptrdiff_t(hl));
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not JSON: ") + e.what());
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  const std::size_t data0 = 8 + std::size_t(hl), dsize = b.size() - data0;
  std::map<std::string, std::string> md;
  if (header.contains("__metadata__")) {
    const auto& m = header["__metadata__"];
    if (!m.is_object()) throw bad("__metadata__ is not an object");
    for (auto it = m.begin(); it != m.end(); ++it) {
      if (!it.value().is_string()) throw bad("__metadata__ values must be strings");
      md[it.key()] = it.value().get<std::string>();
    }
  }
  if (!md.count("checksum")) throw bad("no checksum in the metadata");
  const std::string sum = fmt::format("{:016x}", fnv1a64(b.data() + data0, dsize));
  if (sum != md["checksum"]) throw bad(fmt::format("checksum mismatch (stored {}, data {}): corrupted or truncated",
                                                  md["checksum"], sum));
  std::vector<NamedTensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& e = it.value();
    try {
      if (e.at("dtype").get<std::string>() != "F32") throw bad(fmt::format("tensor {}: dtype is not F32", it.key()));
      NamedTensor t;
      t.name = it.key();
      t.shape = e.at("shape").get<std::vector<std::int64_t>>();
      const auto off = e.at("data_offsets").get<std::vector<std::uint64_t>>();
      std::uint64_t n = 1;
      for (auto d : t.shape) {
        if (d < 0 || d > (std::int64_t(1) << 40)) throw bad(fmt::format("tensor {}: bad shape", t.name));
        n *= std::uint64_t(d);
      }
      if (off.size() != 2 || off[0] > off[1] || off[1] > dsize || off[1] - off[0] != n * sizeof(float))
        throw bad(fmt::format("tensor {}: data offsets do not match its shape or the file size", t.name));
      t.data.resize(n);
      if (n) std::memcpy(t.data.data(), b.data() + data0 + off[0], n * sizeof(float));
      out.push_back(std::move(t));
    } catch (const nlohmann::json::exception& ex) {
      throw bad(fmt::format("tensor {}: {}", it.key(), ex.what()));
    }
  }
  if (meta) *meta = std::move(md);
  return out;
}

std::vector<NamedTensor> params_to_tensors(const Layout& lay, const std::vector<float>& p, const std::string& prefix) {
  std::vector<NamedTensor> ts;
  for (auto& t : lay.tensors)
    ts.push_back({prefix + t.name, t.shape, std::vector<float>(p.begin() + t.offset, p.begin() + t.offset + t.size)});
  return ts;
}

void tensors_to_params(const Layout& lay, const std::vector<NamedTensor>& ts, std::vector<float>& p,
                       const std::string& prefix) {
  p.assign(std::size_t(lay.total), 0.f);
  for (auto& spec : lay.tensors) {
    const NamedTensor* found = nullptr;
    for (auto& t : ts)
      if (t.name == prefix + spec.name) found = &t;
    if (!found) throw InputError(fmt::format("tensor '{}' is missing from the file", prefix + spec.name));
    if (found->shape != spec.shape)
      throw InputError(fmt::format("tensor '{}' has shape [{}], config.json implies [{}]", found->name,
                                   fmt::join(found->shape, ", "), fmt::join(spec.shape, ", ")));
    std::copy(found->data.begin(), found->data.end(), p.begin() + spec.offset);
  }
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string s = read_file(path);
  try {
    return nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
}

LoadedModel load_model_dir(const std::string& dir) {
  LoadedModel m;
  m.config_json = read_json_file(dir + "/config.json");
  if (!m.config_json.is_object() || !m.config_json.contains("model"))
    throw InputError(fmt::format("'{}/config.json' has no \"model\" section", dir));
  try {
    from_json(m.config_json["model"], m.cfg);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("'{}/config.json': {}", dir, e.what()));
  }
  m.lay = Layout::make(m.cfg);
  tensors_to_params(m.lay, read_safetensors(dir + "/model.safetensors", nullptr), m.params);
  return m;
}

void write_png(const std::string& path, int w, int h, const std::vector<std::uint8_t>& rgb) {
  if (w <= 0 || h <= 0 || rgb.size() != std::size_t(w) * std::size_t(h) * 3) throw std::logic_error("write_png: bad size");
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw os_error("cannot create", tmp);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    throw std::runtime_error(fmt::format("libpng failed writing '{}'", path));
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y)
    png_write_row(png, const_cast<png_bytep>(rgb.data() + std::size_t(y) * std::size_t(w) * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fflush(f);
  ::fsync(fileno(f));
  std::fclose(f);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw os_error("cannot rename onto", path);
}

namespace {
// 3x5 bitmap glyphs for tick labels and axis titles (bit 2 = left column); unknown characters blank.
const std::uint8_t* glyph(char ch) {
  static const std::uint8_t digits[10][5] = {{7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7},
                                             {5, 5, 7, 1, 1}, {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1},
                                             {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7}};
  static const struct {
    char c;
    std::uint8_t rows[5];
  } letters[] = {{'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}}, {'C', {3, 4, 4, 4, 3}}, {'D', {6, 5, 5, 5, 6}},
                 {'E', {7, 4, 6, 4, 7}}, {'F', {7, 4, 6, 4, 4}}, {'G', {3, 4, 5, 5, 3}}, {'H', {5, 5, 7, 5, 5}},
                 {'L', {4, 4, 4, 4, 7}}, {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}}, {'O', {2, 5, 5, 5, 2}},
                 {'P', {6, 5, 6, 4, 4}}, {'R', {6, 5, 6, 5, 5}}, {'S', {3, 4, 2, 1, 6}}, {'T', {7, 2, 2, 2, 2}},
                 {'U', {5, 5, 5, 5, 7}}, {'I', {7, 2, 2, 2, 7}}, {'J', {1, 1, 1, 5, 2}},
                 {'K', {5, 5, 6, 5, 5}}, {'Q', {2, 5, 5, 6, 3}}, {'V', {5, 5, 5, 5, 2}}, {'W', {5, 5, 7, 7, 5}},
                 {'X', {5, 5, 2, 5, 5}}, {'Y', {5, 5, 2, 2, 2}}, {'Z', {7, 1, 2, 4, 7}}, {'.', {0, 0, 0, 0, 2}},
                 {'-', {0, 0, 7, 0, 0}}, {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}, {'=', {0, 7, 0, 7, 0}},
                 {':', {0, 2, 0, 2, 0}}, {'/', {1, 1, 2, 4, 4}}, {'<', {1, 2, 4, 2, 1}},
                 {'>', {4, 2, 1, 2, 4}}, {',', {0, 0, 0, 2, 4}}, {'_', {0, 0, 0, 0, 7}}};
  static const std::uint8_t blank[5] = {0, 0, 0, 0, 0};
  if (ch >= '0' && ch <= '9') return digits[ch - '0'];
  for (auto& l : letters)
    if (l.c == ch) return l.rows;
  return blank;
}
}  // namespace

Image::Image(int ww, int hh) : w(ww), h(hh), px(std::size_t(ww) * std::size_t(hh) * 3, 255) {}
void Image::set(int x, int y, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  if (x < 0 || y < 0 || x >= w || y >= h) return;
  auto* p = &px[(std::size_t(y) * std::size_t(w) + std::size_t(x)) * 3];
  p[0] = r, p[1] = g, p[2] = b;
}
void Image::text(int x, int y, const std::string& s, int scale, bool vertical) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::uint8_t* g = glyph(char(std::toupper(static_cast<unsigned char>(s[i]))));
    for (int r = 0; r < 5; ++r)
      for (int c = 0; c < 3; ++c)
        if (g[r] & (4 >> c))
          for (int dy = 0; dy < scale; ++dy)
            for (int dx = 0; dx < scale; ++dx) {
              const int along = int(i) * 4 * scale + c * scale + dx, across = r * scale + dy;
              if (vertical) set(x + across, y - along, 0, 0, 0);
              else set(x + along, y + across, 0, 0, 0);
            }
  }
}
void Image::blit(const Image& src, int x0, int y0) {
  for (int y = 0; y < src.h; ++y)
    for (int x = 0; x < src.w; ++x) {
      const auto* p = &src.px[(std::size_t(y) * std::size_t(src.w) + std::size_t(x)) * 3];
      set(x0 + x, y0 + y, p[0], p[1], p[2]);
    }
}

namespace {
// Accuracy 0 -> dark blue, 1 -> yellow (a short viridis-like ramp).
void ramp(double v, std::uint8_t& r, std::uint8_t& g, std::uint8_t& b) {
  static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  v = std::min(1.0, std::max(0.0, v)) * 4;
  const int i = std::min(3, int(v));
  const double f = v - i;
  r = std::uint8_t(stops[i][0] + f * (stops[i + 1][0] - stops[i][0]));
  g = std::uint8_t(stops[i][1] + f * (stops[i + 1][1] - stops[i][1]));
  b = std::uint8_t(stops[i][2] + f * (stops[i + 1][2] - stops[i][2]));
}
}  // namespace

Image heatmap_image(const std::vector<std::vector<double>>& acc, int n_min, int m_min, int train_n, int train_m) {
  const int rows = int(acc.size()), cols = rows ? int(acc[0].size()) : 0;
  if (!rows || !cols) throw InputError("empty grid");
  // Layout: axis title, then tick labels, then the cells (x = operand count, y = operand length).
  const std::string xtitle = "NUMBER OF OPERANDS", ytitle = "LENGTH OF EACH OPERAND";
  const int cell = 16, left = 38, top = 38, sc = 2;
  const int ylen = int(ytitle.size()) * 4;  // title length in pixels at scale 1
  Image cv(std::max(left + cols * cell + 8, left + int(xtitle.size()) * 4 + 8),
            std::max(top + rows * cell + 8, top + ylen + 8));
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      std::uint8_t r = 160, g = 160, b = 160;
      if (!std::isnan(acc[std::size_t(i)][std::size_t(j)])) ramp(acc[std::size_t(i)][std::size_t(j)], r, g, b);
      for (int y = 0; y < cell; ++y)
        for (int x = 0; x < cell; ++x) cv.set(left + j * cell + x, top + i * cell + y, r, g, b);
    }
  cv.text(left + std::max(0, (cols * cell - int(xtitle.size()) * 4) / 2), 4, xtitle, 1);
  cv.text(4, top + std::max(ylen, (rows * cell + ylen) / 2), ytitle, 1, true);
  // Ticks: the first value and every multiple of 5 (as the paper's axes).
  for (int j = 0; j < cols; ++j)
    if (j == 0 || (m_min + j) % 5 == 0) cv.text(left + j * cell + 1, 20, std::to_string(m_min + j), sc);
  for (int i = 0; i < rows; ++i)
    if (i == 0 || (n_min + i) % 5 == 0) cv.text(14, top + i * cell + 3, std::to_string(n_min + i), sc);
  // Training region [1, train_n] x [2, train_m], clipped to the grid, in red (2 px).
  const int i0 = std::max(0, 1 - n_min), i1 = std::min(rows, train_n - n_min + 1);
  const int j0 = std::max(0, 2 - m_min), j1 = std::min(cols, train_m - m_min + 1);
  if (i0 < i1 && j0 < j1) {
    const int x0 = left + j0 * cell, x1 = left + j1 * cell - 1, y0 = top + i0 * cell, y1 = top + i1 * cell - 1;
    for (int k = 0; k < 2; ++k) {
      for (int x = x0; x <= x1; ++x) cv.set(x, y0 + k, 230, 0, 0), cv.set(x, y1 - k, 230, 0, 0);
      for (int y = y0; y <= y1; ++y) cv.set(x0 + k, y, 230, 0, 0), cv.set(x1 - k, y, 230, 0, 0);
    }
  }
  return cv;
}

void write_heatmap_png(const std::string& path, const std::vector<std::vector<double>>& acc, int n_min, int m_min,
                       int train_n, int train_m) {
  write_png(path, heatmap_image(acc, n_min, m_min, train_n, train_m));
}

Image attention_image(const std::vector<float>& a, int T, int scale) {
  const int s = scale > 0 ? scale : T < 64 ? 8 : T < 256 ? 2 : 1;
  Image cv(T * s, T * s);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) {
      const float v = a[std::size_t(i) * std::size_t(T) + std::size_t(j)];
      std::uint8_t r = 0, g = 0, b = 0;
      if (v >= 0.01f) ramp(double(v), r, g, b);
      for (int y = 0; y < s; ++y)
        for (int x = 0; x < s; ++x) cv.set(j * s + x, i * s + y, r, g, b);
    }
  return cv;
}

void write_attention_png(const std::string& path, const std::vector<float>& a, int T) {
  write_png(path, attention_image(a, T));
}

Image side_by_side(const std::vector<std::pair<std::string, Image>>& panels, const std::string& caption) {
  const int gap = 12, title = 18, pad = 6, cap = caption.empty() ? 0 : 18;
  int w = pad, h = 0;
  for (const auto& [t, im] : panels) {
    w += std::max(im.w, int(t.size()) * 8) + gap;
    h = std::max(h, im.h);
  }
  w = std::max(w - gap + pad, int(caption.size()) * 8 + 2 * pad);
  Image out(w, cap + title + h + pad);
  if (cap) out.text(pad, 4, caption, 2);
  int x = pad;
  for (const auto& [t, im] : panels) {
    out.text(x, cap + 4, t, 2);
    out.blit(im, x, cap + title);
    x += std::max(im.w, int(t.size()) * 8) + gap;
  }
  return out;
}

}  // namespace manyadd::learn
