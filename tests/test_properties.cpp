#include <gtest/gtest.h>
TEST(Placeholder, test_properties) { SUCCEED(); }
