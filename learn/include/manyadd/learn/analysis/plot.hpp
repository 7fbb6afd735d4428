// Quick-look PNG figures drawn in C++ (libpng, a 3x5 bitmap font): accuracy heatmaps in the paper's
// layout, attention maps, panels side by side.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace manyadd::learn {

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

// Heatmap of accuracies: a color per cell (NaN = not evaluated, grey), rows top to bottom and
// columns left to right labeled by their values (the first and every multiple of 5), axis titles, and
// the training region (the rows with values in [row_lo, row_hi] times the columns in [col_lo, col_hi])
// outlined in red.
struct HeatmapAxes {
  std::string xtitle, ytitle;
  std::vector<int> rows, cols;  // the value of each row and column
  int row_lo = 1, row_hi = 0, col_lo = 2, col_hi = 0;
};
Image heatmap_image(const std::vector<std::vector<double>>& acc, const HeatmapAxes& axes);
// Addition in the paper's layout (Figure 1): x = number of operands (columns m_min..), y = length of
// each operand (rows n_min..), the training region [1, train_n] x [2, train_m].
Image heatmap_image(const std::vector<std::vector<double>>& acc, int n_min, int m_min, int train_n, int train_m);
void write_heatmap_png(const std::string& path, const std::vector<std::vector<double>>& acc, int n_min, int m_min,
                       int train_n, int train_m);
// Attention map (T, T): grey level = value, values below 0.01 black (the paper's Figure 7 convention).
// scale = pixels per entry (0: 8 below T = 64, 2 below 256, else 1).
Image attention_image(const std::vector<float>& a, int T, int scale = 0);
void write_attention_png(const std::string& path, const std::vector<float>& a, int T);

}  // namespace manyadd::learn
