#include <gtest/gtest.h>
TEST(Placeholder, test_worked_example) { SUCCEED(); }
