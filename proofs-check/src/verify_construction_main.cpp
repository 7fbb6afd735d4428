#include <iostream>

#include "manyadd/verify_cli.hpp"

int main(int argc, char** argv) { return manyadd::verify_construction_main(argc, argv, std::cout, std::cerr); }
