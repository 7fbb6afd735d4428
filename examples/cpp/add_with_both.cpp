// One problem through both halves of manyadd, as a library:
//   the constructed model of Theorem 4.1 for the problem's shape (structured engine, teacher-forced),
//   its certificate for every digit input of that shape, and
//   a learned model read from a directory (config.json + model.safetensors), greedy decoding.
// Usage: add_with_both PROBLEM [LEARNED_DIR]      e.g. add_with_both 57+48+96 models/cpu-sa1010-1l4h-d64
// Exit 0 when every model that ran is exact (and the certificate holds), 1 otherwise, 2 on bad input.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <manyadd/certificate.hpp>
#include <manyadd/core/error.hpp>
#include <manyadd/format.hpp>
#include <manyadd/learn/tasks/data.hpp>
#include <manyadd/learn/runs/eval.hpp>
#include <manyadd/learn/runs/io.hpp>
#include <manyadd/model.hpp>
#include <manyadd/structured.hpp>

int main(int argc, char** argv) {
  return manyadd::run_tool("add_with_both", std::cerr, [&]() -> int {
    using namespace manyadd;
    using namespace manyadd::learn;
    if (argc < 2 || argc > 3) throw InputError("usage: add_with_both PROBLEM [LEARNED_DIR]");
    const Problem p = parse_problem(argv[1]);
    if (p.operands.size() < 2) throw InputError("the problem needs at least two operands");
    std::printf("problem      %s = %s\n", p.to_string().c_str(), reference_sum(p).str().c_str());

    // The construction at the theorem's padding, offsets s1 = s2 = 1.
    const Shape shape = Shape::make(p.max_digits(), std::int64_t(p.operands.size()));
    const Dims dims = dims_ours(shape);
    const ConstructedModel M = build_model(dims.P1, dims.P2, default_lambda(shape.N()));
    const std::vector<std::uint8_t> seq = build_sequence(p, shape);
    const StructuredResult r = structured_forward(M, CompiledFFN::build(M), seq, shape, 1, 1);
    const bool constructed_exact = r.first_mismatch < 0;  // every response token predicted right
    std::printf("constructed  %s  (%s; d = %d)\n", tokens_to_string(r.pred).c_str(),
                constructed_exact ? "exact" : "WRONG", M.d());
    const CertResult cert = certify(M, shape, 1, 1);
    std::printf("certificate  %s for every digit input of TA(%d, %d); min margin %.3g, lambda_min %.3g\n",
                cert.proven ? "PROVEN" : "FAILED", shape.n, shape.m, cert.min_margin, cert.lambda_min);
    bool ok = constructed_exact && cert.proven;

    if (argc == 3) {  // a learned model: its own padding and position-ID rule come from its config.json
      const LoadedModel lm = load_model_dir(argv[2]);
      const Example ex = make_example(p, lm.cfg, 1, 1);
      std::vector<std::uint8_t> out;
      const bool learned_exact = greedy_correct(lm.view(), ex, &out);
      std::printf("learned      %s  (%s; greedy)\n", tokens_to_string(out).c_str(),
                  learned_exact ? "exact" : "WRONG");
      ok = ok && learned_exact;
    }
    return ok ? 0 : 1;
  });
}
