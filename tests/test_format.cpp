#include <gtest/gtest.h>
TEST(Placeholder, test_format) { SUCCEED(); }
