// grid_png: draws a grid CSV (evaluate's, or a median over runs from bench/paper-recipe/summarize.py)
// as the heatmap evaluate draws (learn/plot.hpp: the paper's axes, NA grey, the training region
// outlined). The CSV needs a header with the columns n, m and accuracy (a number in [0, 1] or NA);
// other columns are ignored, missing cells are drawn NA.
// Exit codes: 0 written, 2 bad usage or input, 3 internal error.
#include <cmath>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/error.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/learn/analysis/plot.hpp"

using namespace manyadd;

namespace {
std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string f;
  while (std::getline(ss, f, ',')) out.push_back(f);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Draw a grid CSV (columns n, m, accuracy) as evaluate's heatmap PNG.", "grid_png"};
  std::string csv, png;
  int train_n = 0, train_m = 0;
  cli::add_string(app, "--csv", csv, "grid CSV with a header naming n, m and accuracy")->required();
  cli::add_output(app, "--png", png, "PNG to write")->required();
  cli::add_int(app, "--train-n", train_n, "training region: operand lengths 1..N outlined (0 = none)", 0, 10000);
  cli::add_int(app, "--train-m", train_m, "training region: operand counts 2..M outlined (0 = none)", 0, 10000);
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("grid_png", std::cerr, [&] {
    std::stringstream in(read_file(csv));
    std::string line;
    if (!std::getline(in, line)) throw InputError(fmt::format("'{}' is empty", csv));
    const auto head = split(line);
    int cn = -1, cm = -1, ca = -1;
    for (int i = 0; i < int(head.size()); ++i) {
      if (head[std::size_t(i)] == "n") cn = i;
      if (head[std::size_t(i)] == "m") cm = i;
      if (head[std::size_t(i)] == "accuracy") ca = i;
    }
    if (cn < 0 || cm < 0 || ca < 0) throw InputError(fmt::format("'{}': the header must name n, m and accuracy", csv));
    std::map<std::pair<int, int>, double> cells;
    int n_min = 1 << 30, n_max = -1, m_min = 1 << 30, m_max = -1, row = 1;
    while (std::getline(in, line)) {
      ++row;
      if (line.empty()) continue;
      const auto f = split(line);
      if (int(f.size()) != int(head.size()))
        throw InputError(fmt::format("'{}' line {}: {} fields, the header has {}", csv, row, f.size(), head.size()));
      const int n = int(cli::parse_int(f[std::size_t(cn)], fmt::format("{} line {} n", csv, row), 1, 10000));
      const int m = int(cli::parse_int(f[std::size_t(cm)], fmt::format("{} line {} m", csv, row), 2, 10000));
      const std::string& a = f[std::size_t(ca)];
      const double acc = a == "NA" ? NAN : cli::parse_real(a, fmt::format("{} line {} accuracy", csv, row), 0, 1);
      if (!cells.emplace(std::pair{n, m}, acc).second)
        throw InputError(fmt::format("'{}' line {}: cell ({}, {}) appears twice", csv, row, n, m));
      n_min = std::min(n_min, n), n_max = std::max(n_max, n), m_min = std::min(m_min, m), m_max = std::max(m_max, m);
    }
    if (cells.empty()) throw InputError(fmt::format("'{}' has no cells", csv));
    std::vector<std::vector<double>> acc(std::size_t(n_max - n_min + 1), std::vector<double>(std::size_t(m_max - m_min + 1), NAN));
    for (const auto& [k, v] : cells) acc[std::size_t(k.first - n_min)][std::size_t(k.second - m_min)] = v;
    learn::write_heatmap_png(png, acc, n_min, m_min, train_n, train_m);
    std::cout << fmt::format("{} cells (n {}..{}, m {}..{}) -> {}\n", cells.size(), n_min, n_max, m_min, m_max, png);
    return 0;
  });
}
