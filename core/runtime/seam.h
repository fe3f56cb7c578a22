// One table of exercise seams kept in a slot: the functions a student re-implements, installed
// once by the program (`--impl reference|mine`) and read by core wherever it calls them. (The
// layouts' own exercises - DDP buckets, TP linears, the CP merge, the ZeRO step - are not here:
// each layout receives its table when it is built.) Each table keeps its own install_X_seams() /
// X_seams() names; they forward to Seam<Table>:
//
//   void install_comm_seams(CommSeams s) { Seam<CommSeams>::install(std::move(s)); }
//   const CommSeams& comm_seams() {
//     return Seam<CommSeams>::get("comm seam", Required{"all_reduce", &CommSeams::all_reduce});
//   }
//
// get() throws std::logic_error naming the first required function that is not installed.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace mgpu {

// A function of a seam table that must be installed, with the name the error message uses.
template <class Table, class Member>
struct Required {
  const char* name;
  Member Table::*member;
};
template <class Table, class Member>
Required(const char*, Member Table::*) -> Required<Table, Member>;

template <class Table>
class Seam {
 public:
  static void install(Table table) { slot() = std::move(table); }

  // The installed table; `what` names the table in the error ("ZeRO seam").
  template <class... Members>
  static const Table& get(const char* what, Required<Table, Members>... required) {
    const std::optional<Table>& t = slot();
    const char* missing = nullptr;
    ((missing = missing ? missing : (!t || !((*t).*required.member) ? required.name : nullptr)),
     ...);
    if (!t && !missing) missing = "(all)";
    if (missing)
      throw std::logic_error(std::string(what) + " '" + missing +
                             "' is not installed: call mgpu::reference::install_seams() or "
                             "mgpu::mine::install_seams() first");
    return *t;
  }

 private:
  static std::optional<Table>& slot() {
    static std::optional<Table> table;
    return table;
  }
};

}  // namespace mgpu
