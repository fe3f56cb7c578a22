// A PNG the dashboard wrote, decoded to RGBA for pixel checks. stb_image's implementation is
// compiled once, in png_image.cpp: the viz tests build as one executable (unity batches), where a
// second STB_IMAGE_IMPLEMENTATION would define every decoder twice.
#pragma once
#include <cstddef>
#include <filesystem>
#include <vector>

#include <imgui.h>

namespace mgpu::viz::testing {

// Empty (w = h = 0, no pixels) when the file cannot be read or decoded.
struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> rgba;
  explicit Image(const std::filesystem::path& p);
  ImU32 at(double x, double y) const {
    const size_t i = (static_cast<size_t>(y) * w + static_cast<size_t>(x)) * 4;
    return IM_COL32(rgba[i], rgba[i + 1], rgba[i + 2], 255);
  }
};

}  // namespace mgpu::viz::testing
