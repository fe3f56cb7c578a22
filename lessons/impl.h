// Which implementation of the graded exercises the lessons call: "reference" (solutions/) or
// "mine" (exercises/, the student's). Installs that set into core's seams and says so.
#pragma once
#include <string>

namespace mgpu::lessons {

void select_impl(const std::string& impl);  // throws UsageError for anything else
const std::string& selected_impl();

}  // namespace mgpu::lessons
