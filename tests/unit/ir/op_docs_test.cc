// Walks the op declaration (TW_OP_LIST and the kind lists of ir/ops.h) and checks docs/ops.md,
// the spec every backend follows, has a row for each op and names each kind in a row.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ir/ops.h"

namespace tw::ir {
namespace {

// The first cells of docs/ops.md's table rows.
std::vector<std::string> first_cells() {
  std::ifstream in(std::string(TW_DOCS_DIR) + "/ops.md");
  std::vector<std::string> cells;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| ", 0) != 0) continue;
    const size_t end = line.find(" |", 2);
    if (end != std::string::npos) cells.push_back(line.substr(2, end - 2));
  }
  return cells;
}

// The words of a cell ("Unary exp, log" -> Unary, exp, log).
std::set<std::string> words(const std::string& cell) {
  std::set<std::string> out;
  std::string w;
  for (char ch : cell + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') {
      w += ch;
    } else if (!w.empty()) {
      out.insert(w);
      w.clear();
    }
  }
  return out;
}

TEST(OpsDoc, EveryDeclaredOpHasARow) {
  const std::vector<std::string> cells = first_cells();
  ASSERT_FALSE(cells.empty()) << "cannot read " TW_DOCS_DIR "/ops.md";
  auto has_row = [&](const std::string& name) {
    for (const std::string& c : cells) {
      if (c.rfind(name + "(", 0) == 0 || c.rfind(name + " ", 0) == 0) return true;
    }
    return false;
  };
#define TW_CHECK_OP(Name, code, since)                                  \
  EXPECT_TRUE(has_row(#Name)) << "docs/ops.md has no row for op " #Name \
                                 " (a row starting `| " #Name "(`)";
  TW_OP_LIST(TW_CHECK_OP)
#undef TW_CHECK_OP
}

TEST(OpsDoc, EveryDeclaredKindIsNamedInARowOfItsFamily) {
  const std::vector<std::string> cells = first_cells();
  ASSERT_FALSE(cells.empty()) << "cannot read " TW_DOCS_DIR "/ops.md";
  // Unary and binary kinds are listed in rows "Unary k1, k2" / "Binary k1, k2"; reduce kinds in
  // the rows after Reduce's ("sum, prod").
  auto named = [&](const std::string& family, const std::string& kind) {
    for (const std::string& c : cells) {
      const std::set<std::string> w = words(c);
      if ((family.empty() || w.count(family)) && w.count(kind)) return true;
    }
    return false;
  };
#define TW_CHECK_KIND(family, Kind, ir_name) \
  EXPECT_TRUE(named(family, #ir_name))       \
      << "docs/ops.md names no " << (*family ? family : "reduce") << " kind " #ir_name;
#define TW_UNARY(Kind, ir_name, ...) TW_CHECK_KIND("Unary", Kind, ir_name)
#define TW_BINARY(Kind, ir_name, ...) TW_CHECK_KIND("Binary", Kind, ir_name)
#define TW_REDUCE(Kind, ir_name, ...) TW_CHECK_KIND("", Kind, ir_name)
  TW_UNARY_KINDS(TW_UNARY)
  TW_BINARY_KINDS(TW_BINARY)
  TW_REDUCE_KINDS(TW_REDUCE)
#undef TW_UNARY
#undef TW_BINARY
#undef TW_REDUCE
#undef TW_CHECK_KIND
}

}  // namespace
}  // namespace tw::ir
