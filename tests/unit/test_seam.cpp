// Seam<Table>: the one store behind every exercise seam table (install_X_seams / X_seams). Before
// anything is installed, or with a required function left empty, get() names the missing one.
#include <catch2/catch.hpp>

#include <functional>
#include <stdexcept>
#include <string>

#include "core/runtime/seam.h"

using namespace mgpu;

namespace {
struct DemoSeams {
  std::function<int(int)> first;
  std::function<int(int)> second;
};
const DemoSeams& demo_seams() {
  return Seam<DemoSeams>::get("demo seam", Required{"first", &DemoSeams::first},
                              Required{"second", &DemoSeams::second});
}
std::string error_of_get() {
  try {
    demo_seams();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("a seam table: nothing installed, one missing, then installed", "[seam]") {
  CHECK(error_of_get() ==
        "demo seam 'first' is not installed: call mgpu::reference::install_seams() or "
        "mgpu::mine::install_seams() first");
  Seam<DemoSeams>::install({.first = [](int x) { return x + 1; }, .second = nullptr});
  CHECK_THAT(error_of_get(), Catch::StartsWith("demo seam 'second' is not installed"));
  Seam<DemoSeams>::install(
      {.first = [](int x) { return x + 1; }, .second = [](int x) { return 2 * x; }});
  CHECK(demo_seams().first(1) == 2);
  CHECK(demo_seams().second(3) == 6);
  // Installing again replaces the table (--impl mine after reference).
  Seam<DemoSeams>::install(
      {.first = [](int x) { return x - 1; }, .second = [](int x) { return 3 * x; }});
  CHECK(demo_seams().first(1) == 0);
}
