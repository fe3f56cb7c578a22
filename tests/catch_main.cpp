// The one Catch2 main shared by every test executable. It selects the exercise implementations
// first: the reference, or the student's when MGPU_IMPL=mine (graded tests must pass on the
// reference and fail on the untouched stubs). Tests hand what they build the part it runs of
// ex::selected_seams().
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "exercises/exercises.h"
#include "exercises/selection.h"

int main(int argc, char* argv[]) {
  const char* impl = std::getenv("MGPU_IMPL");
  const bool mine = impl && std::string(impl) == "mine";
  mgpu::ex::use_seams(mine ? mgpu::mine::seams() : mgpu::reference::seams());
  return Catch::Session().run(argc, argv);
}
