#include <gtest/gtest.h>
TEST(Placeholder, test_verify_cli) { SUCCEED(); }
