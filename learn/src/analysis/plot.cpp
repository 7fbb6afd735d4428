// Quick-look figures: see plot.hpp.
#include "manyadd/learn/analysis/plot.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <png.h>
#include <unistd.h>

#include <fmt/format.h>

#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"

namespace manyadd::learn {

void write_png(const std::string& path, int w, int h, const std::vector<std::uint8_t>& rgb) {
  if (w <= 0 || h <= 0 || rgb.size() != std::size_t(w) * std::size_t(h) * 3)
    throw InvariantError("write_png: the pixel buffer does not match the size");
  // Encoded in memory, then written by the one atomic writer.
  std::string bytes;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error(fmt::format("libpng failed encoding '{}'", path));
  }
  png_set_write_fn(
      png, &bytes,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<const char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y)
    png_write_row(png, const_cast<png_bytep>(rgb.data() + std::size_t(y) * std::size_t(w) * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  atomic_write(path, bytes);
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

Image heatmap_image(const std::vector<std::vector<double>>& acc, const HeatmapAxes& ax) {
  const int rows = int(acc.size()), cols = rows ? int(acc[0].size()) : 0;
  if (!rows || !cols) throw InputError("empty grid");
  if (int(ax.rows.size()) != rows || int(ax.cols.size()) != cols) throw InvariantError("heatmap: axis values and grid differ");
  // Layout: axis title, then tick labels, then the cells.
  const std::string& xtitle = ax.xtitle;
  const std::string& ytitle = ax.ytitle;
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
    if (j == 0 || ax.cols[std::size_t(j)] % 5 == 0) cv.text(left + j * cell + 1, 20, std::to_string(ax.cols[std::size_t(j)]), sc);
  for (int i = 0; i < rows; ++i)
    if (i == 0 || ax.rows[std::size_t(i)] % 5 == 0) cv.text(14, top + i * cell + 3, std::to_string(ax.rows[std::size_t(i)]), sc);
  // The training region, clipped to the grid, in red (2 px).
  auto span = [](const std::vector<int>& v, int lo, int hi, int& a, int& b) {
    a = int(v.size()), b = 0;
    for (int k = 0; k < int(v.size()); ++k)
      if (v[std::size_t(k)] >= lo && v[std::size_t(k)] <= hi) a = std::min(a, k), b = k + 1;
  };
  int i0, i1, j0, j1;
  span(ax.rows, ax.row_lo, ax.row_hi, i0, i1);
  span(ax.cols, ax.col_lo, ax.col_hi, j0, j1);
  if (i0 < i1 && j0 < j1) {
    const int x0 = left + j0 * cell, x1 = left + j1 * cell - 1, y0 = top + i0 * cell, y1 = top + i1 * cell - 1;
    for (int k = 0; k < 2; ++k) {
      for (int x = x0; x <= x1; ++x) cv.set(x, y0 + k, 230, 0, 0), cv.set(x, y1 - k, 230, 0, 0);
      for (int y = y0; y <= y1; ++y) cv.set(x0 + k, y, 230, 0, 0), cv.set(x1 - k, y, 230, 0, 0);
    }
  }
  return cv;
}

Image heatmap_image(const std::vector<std::vector<double>>& acc, int n_min, int m_min, int train_n, int train_m) {
  HeatmapAxes ax;
  ax.xtitle = "NUMBER OF OPERANDS";
  ax.ytitle = "LENGTH OF EACH OPERAND";
  for (int i = 0; i < int(acc.size()); ++i) ax.rows.push_back(n_min + i);
  for (int j = 0; j < (acc.empty() ? 0 : int(acc[0].size())); ++j) ax.cols.push_back(m_min + j);
  ax.row_lo = 1, ax.row_hi = train_n, ax.col_lo = 2, ax.col_hi = train_m;
  return heatmap_image(acc, ax);
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
