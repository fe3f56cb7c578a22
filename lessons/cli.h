// The `mgpu` command line: list, run LESSON, profiles, viz. Callable in-process (tests pass
// their own streams); returns the exit code: 0 ok, 1 a failure while running, 2 bad input.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace mgpu::lessons {

int mgpu_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace mgpu::lessons
