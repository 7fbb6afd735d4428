// verify_construction_main: parse, plan, then the stages of the mode asked for, under the project's
// error policy (run_tool: InputError and out-of-memory -> 2, anything else -> 3).
#include "manyadd/verify_cli.hpp"

#include "manyadd/core/error.hpp"
#include "manyadd/verify/plan.hpp"
#include "manyadd/verify/stages.hpp"

namespace manyadd {

int verify_construction_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  return run_tool("verify_construction", err, [&] {
    Options o;
    if (const int rc = parse_options(argc, argv, o, out, err); rc >= 0) return rc;
    if (o.whole_claim) return whole_claim_stage(make_whole_claim_plan(o), out);
    if (o.dims_table) return dims_table(make_dims_table_plan(o), out);
    return run_plan(make_plan(o), out);
  });
}

}  // namespace manyadd
