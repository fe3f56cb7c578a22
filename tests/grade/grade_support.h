// Shared by the graded tests. Each graded test case is named "exNN <what it checks> (P pts)" and
// tagged [grade][exNN]; `mgpu grade` reads the points from the name and runs each case on its own.
// Names avoid commas and square brackets so that a name is also a valid Catch2 test spec.
//
// The implementation under test is the one catch_main selected from MGPU_IMPL: the reference, the
// student's (mine), or per exercise (ex04=mine: what `mgpu grade ex04` runs).
#pragma once
#include "core/world/world.h"
#include "exercises/selection.h"

namespace mgpu::grade {

// Whether `exercise` ("ex04") is the student's in this run.
inline bool grading_mine(const char* exercise) {
  return ex::installed_mine(exercise);
}

// `ranks` rank threads on the local backend, their all-reduce the selected one (exercise 01); a
// deadlock in the code under test is reported as a CommError after 3 seconds instead of hanging
// the grader.
inline WorldOptions local_world(int ranks) {
  WorldOptions o;
  o.ranks = ranks;
  o.backend = "local";
  o.comm_timeout = 3;
  o.all_reduce = ex::selected_seams().comm.all_reduce;
  return o;
}

}  // namespace mgpu::grade
