// `mgpu grade` end to end: the real mgpu binary runs the real graded executables (all built in
// MGPU_BINARY_DIR), so these run child processes; absolute paths keep them independent of
// ctest's working directory.
#include <catch2/catch.hpp>

#include <regex>
#include <string>

#include "lessons/grade.h"

using mgpu::lessons::ChildResult;
using mgpu::lessons::run_child;

namespace {

ChildResult mgpu_grade(std::vector<std::string> args) {
  args.insert(args.begin(), {std::string(MGPU_BINARY_DIR) + "/mgpu", "grade"});
  return run_child(args, {{"MGPU_IMPL", ""}}, 600);
}

// The "total  earned/possible" line of the table.
std::pair<int, int> total_points(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex(R"(total\s+(\d+)/(\d+))")));
  return {std::stoi(m[1]), std::stoi(m[2])};
}

}  // namespace

TEST_CASE("mgpu grade on the untouched stubs: 0 points and a non-zero exit", "[cli]") {
  ChildResult r = mgpu_grade({});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  auto [earned, possible] = total_points(r.output);
  CHECK(earned == 0);
  CHECK(possible > 0);
  CHECK(r.output.find("not implemented yet: see docs/exercises/01-ring-all-reduce.md") !=
        std::string::npos);
  CHECK(r.output.find("hint: ") != std::string::npos);
}

TEST_CASE("mgpu grade keeps the failing check's context and its whole message", "[cli]") {
  ChildResult r = mgpu_grade({"ex01"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  // The first check on 2 ranks with an empty tensor: its INFO context, then the exception's
  // message to its last character (a long line is not cut).
  CHECK(r.output.find("context: 'ranks=2 length=0 op=sum'") != std::string::npos);
  // (Either rank may throw first: the ranks are threads.)
  CHECK(r.output.find("exception: 'rank ") != std::string::npos);
  CHECK(r.output.find(": not implemented yet: see docs/exercises/01-ring-all-reduce.md'") !=
        std::string::npos);
  CHECK(r.output.find("...") == std::string::npos);
}

TEST_CASE("mgpu grade's hint is the failing check's", "[cli]") {
  using mgpu::lessons::grade_hint;
  const std::string gpipe = grade_hint("ex03", "ex03 GPipe: all forwards then all backwards");
  const std::string one_f_one_b = grade_hint("ex03", "ex03 1F1B: a valid schedule (4 pts)");
  const std::string diagrams = grade_hint("ex03", "ex03 compute orders equal the reference");
  CHECK(gpipe.find("B0 B1 ... B(M-1)") != std::string::npos);  // not "in reverse"
  CHECK(one_f_one_b.find("warms up with min(M, P-s-1) forwards") != std::string::npos);
  CHECK(diagrams.find("micro-batch 0, 1, 2") != std::string::npos);
  const std::string zbv =
      grade_hint("ex03", "ex03 ZB-V: a V-shaped schedule that is deadlock-free");
  CHECK(zbv.find("2(P-s)-1 chunk-0 forwards") != std::string::npos);
  CHECK(grade_hint("ex01", "ex01 avg on 1..8 ranks") != grade_hint("ex01", "ex01 sum on 2 ranks"));
  CHECK(grade_hint("ex99", "anything").empty());
}

TEST_CASE("mgpu grade --list: every exercise with its file, page and the graded points", "[cli]") {
  ChildResult r = mgpu_grade({"--list"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* ex : {"ex01", "ex02", "ex03", "ex04", "ex05", "ex06", "ex07", "ex08", "ex09"})
    CHECK(r.output.find(std::string(ex) + " ") != std::string::npos);
  CHECK(r.output.find("edit exercises/pipeline_schedules.cpp") != std::string::npos);
  // Each exercise's points come from its graded checks; the last line sums them.
  int sum = 0;
  const std::regex pts(R"( (\d+) pts  edit )");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), pts), end; it != end; ++it)
    sum += std::stoi((*it)[1]);
  CHECK(sum > 0);
  CHECK(r.output.find("9 exercises, ") != std::string::npos);
  CHECK(r.output.find(", " + std::to_string(sum) + " points\n") != std::string::npos);
}

TEST_CASE("mgpu grade --impl reference: full points and exit 0", "[cli]") {
  ChildResult r = mgpu_grade({"--impl", "reference"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  auto [earned, possible] = total_points(r.output);
  CHECK(possible > 0);
  CHECK(earned == possible);
  CHECK(r.output.find("FAIL") == std::string::npos);
}

TEST_CASE("mgpu grade exNN grades one exercise", "[cli]") {
  ChildResult r = mgpu_grade({"ex04", "--impl", "reference"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("ex04 bubble accounting") != std::string::npos);
  CHECK(r.output.find("ex01") == std::string::npos);
}

TEST_CASE("mgpu grade with an unknown exercise: one line and exit 2", "[cli]") {
  ChildResult r = mgpu_grade({"ex99"});
  CHECK(r.exit_code == 2);
  CHECK(r.output ==
        "mgpu grade: error: unknown exercise 'ex99' (available: ex01, ex02, ex03, "
        "ex04, ex05, ex06, ex07, ex08, ex09)\n");
  CHECK(mgpu_grade({"--impl", "yours"}).exit_code == 2);
}

TEST_CASE("mgpu run --impl mine on the untouched stubs: every exercise falls back with one line",
          "[cli]") {
  ChildResult r = run_child({std::string(MGPU_BINARY_DIR) + "/mgpu", "run", "single_device",
                             "--steps", "1", "--impl", "mine"},
                            {{"MGPU_IMPL", ""}}, 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  for (const char* ex : {"ex01", "ex02", "ex03", "ex04", "ex05", "ex06", "ex07", "ex08", "ex09"})
    CHECK(r.output.find(std::string(ex) + " not implemented yet: using the reference\n") !=
          std::string::npos);
  // Above the lesson's header: whose code runs (none of the student's yet).
  CHECK(r.output.find("your code (exercises/) runs: none yet; every other exercise is the "
                      "reference\n") != std::string::npos);
}

TEST_CASE("mgpu run --impl with an unknown exercise: one line naming the valid ones and exit 2",
          "[cli]") {
  ChildResult r = run_child(
      {std::string(MGPU_BINARY_DIR) + "/mgpu", "run", "single_device", "--impl", "ex10=mine"},
      {{"MGPU_IMPL", ""}}, 120);
  CHECK(r.exit_code == 2);
  CHECK(r.output.rfind("mgpu run single_device: error: --impl 'ex10=mine': no exercise 'ex10'; "
                       "use reference, mine, or a list like ex01=mine,ex03=mine (exercises: "
                       "ex01, ex02, ex03, ex04, ex05, ex06, ex07, ex08, ex09",
                       0) == 0);
  CHECK(r.output.find('\n') == r.output.size() - 1);
}

TEST_CASE("mgpu grade exNN grades the exercise on its own: the others it calls are the reference",
          "[cli]") {
  // ex06's tensor-parallel layers all-reduce with exercise 01's ring. On the untouched stubs the
  // failure must be ex06's own, not ex01's stub.
  ChildResult own = mgpu_grade({"ex06"});
  INFO(own.output);
  CHECK(own.exit_code == 1);
  CHECK(own.output.find("each exercise graded on its own (the others it calls: the reference)") !=
        std::string::npos);
  CHECK(own.output.find("see docs/exercises/06-tensor-parallel.md") != std::string::npos);
  CHECK(own.output.find("01-ring-all-reduce") == std::string::npos);
  // The reference ex06 passes on its own; over the student's other exercises (--others mine)
  // its layers all-reduce with ex01's untouched stub, and that is what fails.
  CHECK(mgpu_grade({"ex06", "--impl", "reference"}).exit_code == 0);
  ChildResult with_mine = mgpu_grade({"ex06", "--impl", "reference", "--others", "mine"});
  INFO(with_mine.output);
  CHECK(with_mine.exit_code == 1);
  CHECK(with_mine.output.find("each exercise graded on its own (the others it calls: yours)") !=
        std::string::npos);
  CHECK(with_mine.output.find("see docs/exercises/01-ring-all-reduce.md") != std::string::npos);
  CHECK(mgpu_grade({"ex06", "--others", "theirs"}).exit_code == 2);
}

TEST_CASE("a graded executable refuses an MGPU_IMPL that names nothing, in one line, exit 2",
          "[cli]") {
  const std::string exe = std::string(MGPU_BINARY_DIR) + "/test_grade_ex04_bubble_accounting";
  for (const char* bad : {"ex06=mne", "mien", "ex10=mine"}) {
    ChildResult r = run_child({exe, "--list-test-names-only"}, {{"MGPU_IMPL", bad}}, 120);
    INFO(bad << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.rfind(std::string("MGPU_IMPL: --impl '") + bad + "'", 0) == 0);
    CHECK(r.output.find('\n') == r.output.size() - 1);
  }
  // The grammar's valid forms run: the reference passes ex04's checks, ex04's stub fails them.
  CHECK(run_child({exe}, {{"MGPU_IMPL", "ex01=mine,ex04=reference"}}, 300).exit_code == 0);
  CHECK(run_child({exe}, {{"MGPU_IMPL", "ex04=mine"}}, 300).exit_code != 0);
}
