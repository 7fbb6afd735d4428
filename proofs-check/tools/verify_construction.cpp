// verify_construction: build the Theorem 4.1 transformer for a shape and verify it (--help).
#include <iostream>

#include "manyadd/core/error.hpp"
#include "manyadd/verify_cli.hpp"

int main(int argc, char** argv) {
  return manyadd::run_tool("verify_construction", std::cerr,
                           [&] { return manyadd::verify_construction_main(argc, argv, std::cout, std::cerr); });
}
