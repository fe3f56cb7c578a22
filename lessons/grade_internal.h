// What `mgpu grade`'s files share (grade.cpp, grade_failure.cpp): reading a graded test's name
// and output.
#pragma once
#include <string>
#include <vector>

#include "lessons/grade.h"

namespace mgpu::lessons::detail {

// "ex01 sum on 2 ranks (2 pts)" -> 2; a graded case without points counts 1.
int points_in(const std::string& name);
// The non-blank lines of `text`.
std::vector<std::string> lines_of(const std::string& text);
// One graded case's failure: a timeout, a crash, Catch2's first failing check, or the last line.
std::string first_failure(const ChildResult& run, double timeout);

}  // namespace mgpu::lessons::detail
