// The graded exercises as `mgpu grade` lists them: title, page, hints, the stub to edit and the
// lesson that runs it.
#pragma once
#include <string>
#include <vector>

namespace mgpu::lessons {

// The exercises and their hints (short forms of docs/exercises/NN-*.md's "Hints"). Each hint
// names the words of the graded checks it helps with; a failing check gets the first hint whose
// words are in its name, else the first hint.
struct Hint {
  std::string for_checks;  // words in the check's name ("" = any check)
  std::string text;
};

struct ExerciseInfo {
  std::string id;
  std::string title;
  std::string doc;
  std::vector<Hint> hints;
  std::string file;     // the stub the student edits
  std::string runs_in;  // where `--impl mine` shows the student's code in a lesson

  const Hint& hint_for(const std::string& check) const {
    for (auto& h : hints)
      if (!h.for_checks.empty() && check.find(h.for_checks) != std::string::npos) return h;
    return hints.front();
  }
};

// One function per exercise: its title, page, hints (most specific first), stub and lesson.

// Every exercise, in order (ex01 ... ex10).
const std::vector<ExerciseInfo>& exercises();

}  // namespace mgpu::lessons
