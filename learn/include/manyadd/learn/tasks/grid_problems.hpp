// The problems of paper 003 (Sec. III-A): Pi([N1, N2], [D1, D2]), N terms with N uniform in [N1, N2], each
// term's digit count uniform in [D1, D2] and each digit uniform in 0-9 (leading zeros included), as
// construct's Problem; the paper's tables as instance names; a problem typed by a user. The grid model
// (grid/) trains and tests on them, and the decoder is evaluated on the same instances
// (runs/eval.hpp eval_decoder_instance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "manyadd/format.hpp"

namespace manyadd::learn::grid {

// Pi([terms_lo, terms_hi], [digits_lo, digits_hi]) (the paper's problem instances, Sec. III-A).
// Text form: "TERMSxDIGITS", each a number or a range "lo-hi": "2x100", "1-4x1-10".
struct Instance {
  int terms_lo = 1, terms_hi = 1, digits_lo = 1, digits_hi = 1;
  std::string name() const;
  static Instance parse(const std::string& s);  // throws InputError
  void validate() const;                        // throws InputError
};

// The paper's tables as instance names (Table III: "iii"; Table IV left, the noGroups variant on 2 terms of
// many digits: "iv-digits"; right, the base model on N terms of 5 digits: "iv-terms"; "terms": 1x5 ..
// 10x5). InputError for another name.
std::vector<std::string> paper_table(const std::string& t);

// One problem as written: its operands' digit strings (leading zeros kept), in construct's Problem.
Problem sample_problem(Rng& rng, const Instance& inst);
std::string problem_sum(const Problem& p);                   // the sum in decimal, no leading zeros
// A problem typed by a user: "57+48+96" (digits and '+', leading zeros allowed, an optional final '=',
// spaces ignored).
Problem parse_grid_problem(const std::string& s);  // throws InputError

}  // namespace manyadd::learn::grid
