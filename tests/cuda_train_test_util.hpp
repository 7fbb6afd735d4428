// Shared by the CUDA training tests: skip (with the reason) where no usable CUDA device exists.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "manyadd/learn/devices/cuda_device.hpp"

#define REQUIRE_DEVICE()                                                              \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!manyadd::learn::cuda_training_available(&why_)) GTEST_SKIP() << "no CUDA device: " << why_; \
  } while (0)
