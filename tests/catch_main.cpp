// The one Catch2 main shared by every test executable. It selects the exercise implementations
// first: the reference, or the student's when MGPU_IMPL=mine (graded tests must pass on the
// reference and fail on the untouched stubs). Tests hand layouts lessons::selected_seams().
// Built with MGPU_CATCH_MAIN_CORE_ONLY (the sanitizer job's core-only tests) it installs the
// seams without the lessons library.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "exercises/exercises.h"
#ifndef MGPU_CATCH_MAIN_CORE_ONLY
#include "lessons/impl.h"
#endif

int main(int argc, char* argv[]) {
  const char* impl = std::getenv("MGPU_IMPL");
  if (impl && std::string(impl) == "mine") {
    mgpu::mine::install_seams();
#ifndef MGPU_CATCH_MAIN_CORE_ONLY
    mgpu::lessons::use_seams(mgpu::mine::seams());
#endif
  } else {
    mgpu::reference::install_seams();
#ifndef MGPU_CATCH_MAIN_CORE_ONLY
    mgpu::lessons::use_seams(mgpu::reference::seams());
#endif
  }
  return Catch::Session().run(argc, argv);
}
