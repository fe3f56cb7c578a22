// `--impl`: which exercise implementations drive the lessons. With the untouched stubs, `mine`
// falls back everywhere and says so; an explicit list installs exactly what it names; a bad spec
// is one line naming the valid exercises. Which implementation was chosen is read back from the
// selected tables (ex::selected_seams(), what the program hands out).
#include <catch2/catch.hpp>

#include <sstream>

#include <stdexcept>

#include "exercises/exercises.h"
#include "exercises/selection.h"

namespace test_impl_select {

using namespace mgpu;
using ex::select_exercises;

namespace {

// The impl_name each exercise's table holds now in the selection, in exercise order.
std::vector<std::string> installed_names() {
  const ex::SeamTables& selected = ex::selected_seams();
  return {selected.comm.impl_name,      selected.ddp.impl_name,    selected.pipeline.impl_name,
          selected.bubble.impl_name,    selected.memory.impl_name, selected.tp.impl_name,
          selected.cp.impl_name,        selected.zero.impl_name,   selected.moe.side,
          selected.checkpoint.impl_name};
}

// A "mine" table in which exercises 01 and 03 are written (the reference's code, installed under
// the name "mine") and the rest are the untouched stubs.
std::vector<ex::Exercise> mine_with_ex01_and_ex03_written() {
  std::vector<ex::Exercise> table = mine::exercise_table();
  table[0].probe = [] {};
  table[0].install = [](ex::SeamTables& tables) {
    tables.comm = {"mine", &reference::ring_all_reduce};
  };
  table[2].probe = [] {};
  table[2].install = [](ex::SeamTables& tables) {
    tables.pipeline = {"mine", &reference::gpipe_compute_order,
                       &reference::one_f_one_b_compute_order};
  };
  return table;
}

struct RestoreReference {
  ~RestoreReference() { ex::use_seams(reference::seams()); }
};

}  // namespace

TEST_CASE("impl mine with every exercise a stub: each falls back and says so", "[impl]") {
  RestoreReference restore;
  std::ostringstream out;
  const auto choices =
      select_exercises("mine", reference::exercise_table(), mine::exercise_table(), out);
  REQUIRE(choices.size() == 10);
  for (const auto& c : choices) {
    INFO(c.name);
    CHECK(c.installed == "reference");
    CHECK(c.fell_back);
    CHECK(out.str().find(c.name + " not implemented yet: using the reference\n") !=
          std::string::npos);
  }
  CHECK(installed_names() == std::vector<std::string>(10, "reference"));
}

TEST_CASE("impl mine installs each written exercise and falls back only for the stubs", "[impl]") {
  RestoreReference restore;
  std::ostringstream out;
  select_exercises("mine", reference::exercise_table(), mine_with_ex01_and_ex03_written(), out);
  CHECK(installed_names() == std::vector<std::string>{"mine", "reference", "mine", "reference",
                                                      "reference", "reference", "reference",
                                                      "reference", "reference", "reference"});
  CHECK(out.str() ==
        "ex02 not implemented yet: using the reference\n"
        "ex04 not implemented yet: using the reference\n"
        "ex05 not implemented yet: using the reference\n"
        "ex06 not implemented yet: using the reference\n"
        "ex07 not implemented yet: using the reference\n"
        "ex08 not implemented yet: using the reference\n"
        "ex09 not implemented yet: using the reference\n"
        "ex10 not implemented yet: using the reference\n");
}

TEST_CASE("impl ex01=mine: exactly the named exercises are the student's", "[impl]") {
  RestoreReference restore;
  const auto mine = mine_with_ex01_and_ex03_written();
  std::ostringstream out;
  select_exercises("ex01=mine", reference::exercise_table(), mine, out);
  CHECK(installed_names() == std::vector<std::string>{"mine", "reference", "reference", "reference",
                                                      "reference", "reference", "reference",
                                                      "reference", "reference", "reference"});
  CHECK(out.str().empty());

  select_exercises("ex03=mine,ex01=reference", reference::exercise_table(), mine, out);
  CHECK(installed_names() == std::vector<std::string>{"reference", "reference", "mine", "reference",
                                                      "reference", "reference", "reference",
                                                      "reference", "reference", "reference"});
  CHECK(out.str().empty());

  // Asked for explicitly but still a stub: the same one-line fallback.
  const auto choices =
      select_exercises("ex01=mine,ex04=mine", reference::exercise_table(), mine, out);
  CHECK(installed_names() == std::vector<std::string>{"mine", "reference", "reference", "reference",
                                                      "reference", "reference", "reference",
                                                      "reference", "reference", "reference"});
  CHECK(out.str() == "ex04 not implemented yet: using the reference\n");
  CHECK(choices[3].fell_back);
  CHECK_FALSE(choices[0].fell_back);
}

TEST_CASE("impl with a bad spec: one line listing the valid names", "[impl]") {
  RestoreReference restore;
  auto error = [](const std::string& spec) {
    std::ostringstream out;
    try {
      select_exercises(spec, reference::exercise_table(), mine::exercise_table(), out);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (const std::string spec : {"yours", "ex11=mine", "ex01=theirs", "ex01", "ex01=mine,",
                                 "ex01=mine,ex01=reference", ""}) {
    INFO("spec '" << spec << "'");
    const std::string message = error(spec);
    CHECK(message.find("exercises: ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex08, ex09, ex10") !=
          std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  }
  CHECK(error("ex11=mine").find("no exercise 'ex11'") != std::string::npos);
}

TEST_CASE("The stub's probe throws NotImplemented and the reference's probe runs", "[impl]") {
  for (const ex::Exercise& e : mine::exercise_table()) {
    INFO(e.name);
    CHECK_THROWS_AS(e.probe(), ex::NotImplemented);
  }
  for (const ex::Exercise& e : reference::exercise_table()) {
    INFO(e.name);
    CHECK_NOTHROW(e.probe());
  }
}

}  // namespace test_impl_select
