// verify_learned: a trained decoder's worst case on one addition shape (--help; proofs-check/README.md).
#include <iostream>

#include "manyadd/core/error.hpp"
#include "manyadd/learned/verify_learned.hpp"

int main(int argc, char** argv) {
  return manyadd::run_tool("verify_learned", std::cerr,
                           [&] { return manyadd::learned::verify_learned_main(argc, argv, std::cout, std::cerr); });
}
