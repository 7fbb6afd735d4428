// export_qkv --n N --m M --out DIR [--seed S]: writes DIR/qkv.safetensors with, per head h = 1..4,
// q{h} = (Q_h X0)^T (N, d_qk), k{h} = (K_h X0)^T (N, d_qk), v{h} = (V_h X0)^T (N, 1), all F32 row-major,
// for one TA instance of the shape at offsets s1 = s2 = 1 (lambda is folded into Q and K: use scale 1),
// and ref{h} (N - first, 1) F64: the structured engine's head outputs at the response rows first..N-1
// (lambda -> infinity; the real softmax at the model's lambda differs by < u e^{-2 lambda} relative,
// u < N the unmatched keys: < 1e-4 at N = 2M), the reference for the peers' errors.
// bench/sdpa_compare.py feeds them to torch's scaled_dot_product_attention. CPU only; streamed, so
// memory stays O(chunk d) besides the file.
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "manyadd/core/cli.hpp"
#include "manyadd/core/files.hpp"
#include "manyadd/core/safetensors.hpp"
#include "manyadd/format.hpp"
#include "manyadd/model.hpp"
#include "manyadd/structured.hpp"

using namespace manyadd;

int main(int argc, char** argv) {
  CLI::App app{"Write the constructed model's per-head q, k, v rows of one TA(n, m) instance (bench/sdpa_compare.py).",
               "export_qkv"};
  std::int64_t n = 0, m = 0;
  std::uint64_t seed = 1;
  std::string dir;
  cli::add_int(app, "--n", n, "digits per operand", 1, 100000, false)->required();
  cli::add_int(app, "--m", m, "operands; (n, m) whose file would pass 8 GiB are refused", 1, 100000, false)->required();
  cli::add_string(app, "--out", dir, "output directory (created)")->required();
  cli::add_seed(app, seed, "seed of the instance");
  app.footer(cli::exit_codes_footer(false));
  if (const int rc = cli::parse(app, argc, argv, std::cout, std::cerr); rc >= 0) return rc;
  return run_tool("export_qkv", std::cerr, [&] {
    const Shape shape = Shape::make(n, m);
    const std::int64_t N = shape.N();
    // 4 heads x (q, k: N x 45 at most, v: N) floats: refuse before writing gigabytes.
    const double bytes = double(N) * 4 * (2 * 45 + 1) * 4;
    if (bytes > double(std::int64_t(8) << 30))
      throw InputError(fmt::format("n = {}, m = {} gives N = {} tokens: the file would take ~{:.1f} GiB (limit 8)", n, m,
                                   N, bytes / double(1 << 30)));
    Rng rng(seed);
    const Dims dims = dims_ours(shape);
    const ConstructedModel M = build_model(dims.P1, dims.P2, default_lambda(N));
    const auto seq = build_sequence(sample_TA(rng, shape.n, shape.m), shape);
    const auto ids = position_ids(shape, 1, 1);
    std::vector<TensorDecl> decls;  // in order: q1 k1 v1 ... q4 k4 v4
    for (int h = 1; h <= 4; ++h) {
      const auto& H = M.heads[std::size_t(h - 1)];
      decls.push_back({fmt::format("q{}", h), DType::F32, {N, std::int64_t(H.Q.rows())}});
      decls.push_back({fmt::format("k{}", h), DType::F32, {N, std::int64_t(H.K.rows())}});
      decls.push_back({fmt::format("v{}", h), DType::F32, {N, std::int64_t(H.V.rows())}});
    }
    const std::int64_t first = shape.eq_index();
    for (int h = 1; h <= 4; ++h) decls.push_back({fmt::format("ref{}", h), DType::F64, {N - first, 1}});
    StructuredOptions so;
    so.keep_outputs = true;
    const StructuredResult S = structured_forward(M, CompiledFFN::build(M), seq, shape, 1, 1, so);
    make_output_dir(dir);
    SafetensorsWriter w(dir + "/qkv.safetensors", decls,
                        {{"n", std::to_string(shape.n)},
                         {"m", std::to_string(shape.m)},
                         {"N", std::to_string(N)},
                         {"first", std::to_string(first)},
                         {"lambda", fmt::format("{}", M.heads[0].lambda)}});
    constexpr std::int64_t chunk = 1 << 16;  // tokens per pass over X0
    for (std::size_t t = 0; t < 12; ++t) {  // q, k, v of the 4 heads; then ref
      const auto& H = M.heads[t / 3];
      const Eigen::MatrixXd& A = t % 3 == 0 ? H.Q : t % 3 == 1 ? H.K : H.V;
      for (std::int64_t c0 = 0; c0 < N; c0 += chunk) {
        const std::int64_t c1 = std::min(N, c0 + chunk);
        std::vector<std::uint8_t> tk(seq.begin() + c0, seq.begin() + c1);
        PositionIds part;
        part.p1.assign(ids.p1.begin() + c0, ids.p1.begin() + c1);
        part.p2.assign(ids.p2.begin() + c0, ids.p2.begin() + c1);
        const Eigen::MatrixXf Y = (A * embed(M, tk, part)).cast<float>();  // (cols, c1 - c0), column = token
        w.write(Y.data(), std::size_t(Y.size()) * 4);  // column-major (cols, tokens) = row-major (tokens, cols)
      }
    }
    for (std::size_t h = 0; h < 4; ++h) {
      std::vector<double> ref(std::size_t(N - first));
      for (std::size_t r = 0; r < ref.size(); ++r) ref[r] = S.out[r][h];
      w.write(ref.data(), ref.size() * 8);
    }
    w.commit();
    std::cout << fmt::format("wrote {}/qkv.safetensors: n={} m={} N={} lambda={}\n", dir, shape.n, shape.m, N,
                             M.heads[0].lambda);
    return 0;
  });
}
