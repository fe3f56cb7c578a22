// The one Catch2 main shared by every test executable. It selects the exercise implementations
// first, as MGPU_IMPL names them in --impl's grammar (exercises/selection.h): unset or empty, the
// reference; "mine"; or "ex06=mine" (`mgpu grade ex06` grades ex06 on the reference for the
// others). The stubs run as they are, unprobed: graded tests must pass on the reference and fail
// on the untouched stubs. A value that names nothing is refused in one line, exit code 2, rather
// than graded as the reference. Tests hand what they build the part it runs of
// ex::selected_seams().
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "exercises/exercises.h"
#include "exercises/selection.h"

int main(int argc, char* argv[]) {
  const char* impl = std::getenv("MGPU_IMPL");
  const std::string spec = impl && *impl ? impl : "reference";
  try {
    mgpu::ex::select_unprobed(spec);
  } catch (const std::invalid_argument& e) {
    std::cerr << "MGPU_IMPL: " << e.what() << "\n";
    return 2;
  }
  return Catch::Session().run(argc, argv);
}
