// stb_image's decoder, once for all the viz tests (png_image.h).
#include "viz/png_image.h"

#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#include <stb_image.h>

namespace mgpu::viz::testing {

Image::Image(const std::filesystem::path& p) {
  int n = 0;
  unsigned char* data = stbi_load(p.string().c_str(), &w, &h, &n, 4);
  if (data) {
    rgba.assign(data, data + static_cast<size_t>(w) * h * 4);
    stbi_image_free(data);
  }
}

}  // namespace mgpu::viz::testing
