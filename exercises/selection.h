// Which implementation of each graded exercise the program runs: the reference (solutions/) or
// the student's (exercises/). Beside the tables, apart from the lessons, so that every test
// shares one main that selects them. `--impl` takes
//   reference                 every exercise from solutions/ (the default)
//   mine                      every exercise the student has written; each one still a stub
//                             falls back to the reference and says so on one line
//   ex01=mine,ex03=mine       the named exercises as given (mine or reference), the rest reference
// A stub is found honestly: every exercise has a tiny probe call, and a stub throws
// ex::NotImplemented from it.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "exercises/types.h"

namespace mgpu::ex {

// What was selected for one exercise.
struct ExerciseChoice {
  std::string name;        // "ex01"
  std::string installed;   // "mine" or "reference"
  bool fell_back = false;  // asked for "mine", but it is still a stub
};

// Parses `spec`, probes and selects; prints one line per fallback to `out`. Throws
// std::invalid_argument (one line listing the valid names) for a bad spec.
void select_impl(const std::string& spec, std::ostream& out);
void select_impl(const std::string& spec);  // fallback lines to std::cout
const std::string& selected_impl();
// Per exercise, what the last select_impl selected.
const std::vector<ExerciseChoice>& installed_exercises();
// The exercise functions the program hands out (the reference's until a selection is made): each
// lesson hands a World, a layout, a schedule or a table the part it runs.
const SeamTables& selected_seams();
// Makes `tables` the selection without probing (the graded tests run the stubs as they are).
void use_seams(const SeamTables& tables);
// Selects what `spec` names (the --impl grammar above) without probing: a stub stays a stub (the
// graded tests run the stubs as they are). Throws std::invalid_argument (one line listing the
// valid names) for a bad spec.
void select_unprobed(const std::string& spec);
// Whether the last selection installed the student's `exercise` ("ex04").
bool installed_mine(const std::string& exercise);

// The same with the two tables given (tests hand in a "mine" table whose exercises are known);
// the result becomes selected_seams().
std::vector<ExerciseChoice> select_exercises(const std::string& spec,
                                             const std::vector<Exercise>& reference,
                                             const std::vector<Exercise>& mine, std::ostream& out);

}  // namespace mgpu::ex
