// export_qkv N_DIGITS M_OPERANDS OUT_DIR [SEED]: writes OUT_DIR/qkv.safetensors with, per head h = 1..4,
// q{h} = (Q_h X0)^T (N, d_qk), k{h} = (K_h X0)^T (N, d_qk), v{h} = (V_h X0)^T (N, 1), all F32 row-major,
// for one TA instance of the shape at offsets s1 = s2 = 1 (lambda is folded into Q and K: use scale 1).
// bench/sdpa_compare.py feeds them to torch's scaled_dot_product_attention. CPU only.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "manyadd/format.hpp"
#include "manyadd/model.hpp"

using namespace manyadd;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: export_qkv N_DIGITS M_OPERANDS OUT_DIR [SEED]\n";
    return 2;
  }
  try {
    const Shape shape = Shape::make(std::stoll(argv[1]), std::stoll(argv[2]));
    const std::string dir = argv[3];
    Rng rng(argc > 4 ? std::stoull(argv[4]) : 1);
    const Dims dims = dims_ours(shape);
    const ConstructedModel M = build_model(dims.P1, dims.P2, default_lambda(shape.N()));
    const auto seq = build_sequence(sample_TA(rng, shape.n, shape.m), shape);
    const auto ids = position_ids(shape, 1, 1);
    const std::int64_t N = shape.N();
    // tensors, in order: q1 k1 v1 ... q4 k4 v4
    std::vector<std::string> names;
    std::vector<std::int64_t> cols;
    for (int h = 1; h <= 4; ++h) {
      const auto& H = M.heads[std::size_t(h - 1)];
      names.insert(names.end(), {fmt::format("q{}", h), fmt::format("k{}", h), fmt::format("v{}", h)});
      cols.insert(cols.end(), {std::int64_t(H.Q.rows()), std::int64_t(H.K.rows()), std::int64_t(H.V.rows())});
    }
    std::string header = "{";
    std::int64_t off = 0;
    for (std::size_t t = 0; t < names.size(); ++t) {
      const std::int64_t bytes = N * cols[t] * 4;
      header += fmt::format("\"{}\":{{\"dtype\":\"F32\",\"shape\":[{},{}],\"data_offsets\":[{},{}]}},", names[t], N,
                            cols[t], off, off + bytes);
      off += bytes;
    }
    header += fmt::format("\"__metadata__\":{{\"n\":\"{}\",\"m\":\"{}\",\"N\":\"{}\",\"lambda\":\"{}\"}}}}", shape.n,
                          shape.m, N, M.heads[0].lambda);
    while (header.size() % 8) header += ' ';
    std::filesystem::create_directories(dir);
    std::ofstream f(dir + "/qkv.safetensors", std::ios::binary);
    const std::uint64_t hl = header.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);  // little-endian on x86-64 and aarch64
    f << header;
    // X0 in chunks of columns, so memory stays O(chunk d) besides the output stream
    constexpr std::int64_t chunk = 1 << 16;
    for (std::size_t t = 0; t < names.size(); ++t) {
      const auto& H = M.heads[t / 3];
      const Eigen::MatrixXd& A = t % 3 == 0 ? H.Q : t % 3 == 1 ? H.K : H.V;
      for (std::int64_t c0 = 0; c0 < N; c0 += chunk) {
        const std::int64_t c1 = std::min(N, c0 + chunk);
        std::vector<std::uint8_t> tk(seq.begin() + c0, seq.begin() + c1);
        PositionIds part;
        part.p1.assign(ids.p1.begin() + c0, ids.p1.begin() + c1);
        part.p2.assign(ids.p2.begin() + c0, ids.p2.begin() + c1);
        const Eigen::MatrixXf Y = (A * embed(M, tk, part)).cast<float>();  // (cols, c1 - c0), column = token
        f.write(reinterpret_cast<const char*>(Y.data()), std::streamsize(Y.size() * 4));  // = (tokens, cols) row-major
      }
    }
    if (!f) throw InputError("export_qkv: cannot write " + dir + "/qkv.safetensors");
    std::cout << fmt::format("wrote {}/qkv.safetensors: n={} m={} N={} lambda={}\n", dir, shape.n, shape.m, N,
                             M.heads[0].lambda);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "export_qkv: " << e.what() << "\n";
    return 2;
  }
}
