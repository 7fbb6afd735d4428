// Files of learn/: safetensors (the format PyTorch's `safetensors.torch.load_file` reads) with an
// FNV-1a checksum of the data in the metadata, atomic writes (tmp + fsync + rename), model
// directories (config.json + model.safetensors), PNG images.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manyadd/learn/model.hpp"

namespace manyadd::learn {

// Writes `bytes` to `path` atomically: path.tmp, fsync, rename, fsync of the directory. Throws
// std::runtime_error (with the OS message) on I/O failure.
void atomic_write(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);  // throws InputError when unreadable

std::uint64_t fnv1a64(const void* data, std::size_t n, std::uint64_t h = 1469598103934665603ull);

// One fp32 tensor to write or that was read.
struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};
// Tensors are written in the given order; metadata gets "checksum" (FNV-1a 64 of the data section,
// hex) added. Every load verifies the header, offsets, sizes and the checksum: a truncated or
// corrupted file raises InputError naming the problem.
std::string safetensors_bytes(const std::vector<NamedTensor>& ts, std::map<std::string, std::string> meta);
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& ts,
                       const std::map<std::string, std::string>& meta);
std::vector<NamedTensor> read_safetensors(const std::string& path, std::map<std::string, std::string>* meta);

// Parameters <-> tensors of a layout.
std::vector<NamedTensor> params_to_tensors(const Layout& lay, const std::vector<float>& p, const std::string& prefix = "");
// Fills p (size lay.total) from tensors named prefix + layout names; shapes must match exactly.
void tensors_to_params(const Layout& lay, const std::vector<NamedTensor>& ts, std::vector<float>& p,
                       const std::string& prefix = "");

// A model directory: config.json ({"model": ModelConfig, ...}) + model.safetensors.
struct LoadedModel {
  ModelConfig cfg;
  Layout lay;
  std::vector<float> params;
  nlohmann::json config_json;  // the whole config.json
};
LoadedModel load_model_dir(const std::string& dir);  // throws InputError
nlohmann::json read_json_file(const std::string& path);  // throws InputError on parse errors

// PNG writer (8-bit RGB), via libpng. rgb is (h, w, 3) row-major.
void write_png(const std::string& path, int w, int h, const std::vector<std::uint8_t>& rgb);

// An RGB image (white background) with a small bitmap font (3x5 glyphs: digits, letters, . , - _ ( ) = : / < >)
// for axis labels and titles.
struct Image {
  int w = 0, h = 0;
  std::vector<std::uint8_t> px;  // (h, w, 3) row-major
  Image(int ww, int hh);
  void set(int x, int y, std::uint8_t r, std::uint8_t g, std::uint8_t b);  // clipped
  // Draws s (upper-cased) left to right from (x, y), or, if vertical, bottom to top (a y-axis title).
  void text(int x, int y, const std::string& s, int scale, bool vertical = false);
  void blit(const Image& src, int x, int y);  // copies src with its top-left corner at (x, y)
};
inline void write_png(const std::string& path, const Image& im) { write_png(path, im.w, im.h, im.px); }
// Panels left to right, each under its title, an optional caption line on top.
Image side_by_side(const std::vector<std::pair<std::string, Image>>& panels, const std::string& caption = "");

// Heatmap of exact-match accuracy in the paper's layout (Figure 1): x = number of operands (columns,
// m_min..m_max left to right), y = length of each operand (rows, n_min..n_max top to bottom), a color
// per cell (NaN = not evaluated, grey), tick labels every 5, and the training region
// [1, train_n] x [2, train_m] outlined in red.
Image heatmap_image(const std::vector<std::vector<double>>& acc, int n_min, int m_min, int train_n, int train_m);
void write_heatmap_png(const std::string& path, const std::vector<std::vector<double>>& acc, int n_min, int m_min,
                       int train_n, int train_m);
// Attention map (T, T): grey level = value, values below 0.01 black (the paper's Figure 7 convention).
// scale = pixels per entry (0: 8 below T = 64, 2 below 256, else 1).
Image attention_image(const std::vector<float>& a, int T, int scale = 0);
void write_attention_png(const std::string& path, const std::vector<float>& a, int T);

}  // namespace manyadd::learn
