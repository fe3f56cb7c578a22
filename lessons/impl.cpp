#include "lessons/impl.h"

#include "lessons/lesson.h"

namespace mgpu {
namespace reference {
void install_seams();
}
namespace mine {
void install_seams();
}
}  // namespace mgpu

namespace mgpu::lessons {

namespace {
std::string g_selected;
}

void select_impl(const std::string& impl) {
  if (impl == "reference")
    reference::install_seams();
  else if (impl == "mine")
    mine::install_seams();
  else
    throw UsageError("--impl must be 'reference' or 'mine', not '" + impl + "'");
  g_selected = impl;
}

const std::string& selected_impl() {
  return g_selected;
}

}  // namespace mgpu::lessons
