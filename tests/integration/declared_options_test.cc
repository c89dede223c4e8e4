// What is declared once and documented from its declaration: the environment variables
// (core/env.h), whose table in docs/remote.md is what `tensorwire env --markdown` prints, and the
// server's options (tensorwire/server.h, ServerOptions::fields), whose table is what
// `tensorwire-server --help-markdown` prints and whose flags the server parses from the same
// declarations. Values are parsed as declared; a malformed environment value is ignored (the
// default holds) rather than read as 0, and a flag out of its range is refused by name.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "client/connection.h"
#include "core/env.h"
#include "tensorwire/server.h"

#ifndef TW_SERVER_BINARY
#error "TW_SERVER_BINARY must name the tensorwire-server executable"
#endif
#ifndef TW_DOCS_DIR
#error "TW_DOCS_DIR must name the docs/ folder"
#endif

namespace tw {
namespace {

std::string read_docs(const std::string& name) {
  std::ifstream in(std::string(TW_DOCS_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EnvVars, TheDocsTableListsExactlyTheDeclaredOnes) {
  const std::string doc = read_docs("remote.md");
  ASSERT_FALSE(doc.empty());
  std::set<std::string> declared;
  for (const EnvVar& v : env_vars()) {
    declared.insert(v.name);
    const std::string row =
        std::string("| `") + v.name + "` | " + env_kind_name(v.kind) + " | " + v.what + " |";
    EXPECT_NE(doc.find(row), std::string::npos)
        << "docs/remote.md lacks the row (tensorwire env --markdown prints it):\n"
        << row;
  }
  // And no row for a variable nobody reads any more.
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `TW_", 0) != 0) continue;
    const std::string name = line.substr(3, line.find('`', 3) - 3);
    EXPECT_TRUE(declared.count(name))
        << "docs/remote.md lists " << name << ", which core/env.h does not declare";
  }
}

// Runs a command; its stdout and stderr, and its exit status.
std::pair<std::string, int> run(const std::string& cmd) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = p ? ::pclose(p) : -1;
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(ServerOptions, TheDocsTableIsWhatTheServerPrints) {
  const std::string doc = read_docs("remote.md");
  const auto [table, rc] = run(std::string(TW_SERVER_BINARY) + " --help-markdown");
  ASSERT_EQ(rc, 0) << table;
  std::set<std::string> rows;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `--", 0) != 0) continue;
    rows.insert(line);
    EXPECT_NE(doc.find(line), std::string::npos)
        << "docs/remote.md lacks the row (tensorwire-server --help-markdown prints it):\n"
        << line;
  }
  EXPECT_GT(rows.size(), 20u);
  std::istringstream doc_lines(doc);
  for (std::string line; std::getline(doc_lines, line);) {
    if (line.rfind("| `--", 0) != 0) continue;
    EXPECT_TRUE(rows.count(line)) << "docs/remote.md has a row the server does not print:\n"
                                  << line;
  }
}

TEST(ServerOptions, FlagsAreParsedFromTheDeclarations) {
  const std::string server = TW_SERVER_BINARY;
  // Out of range: refused by name (the spin was clamped without a word before).
  auto [out, rc] = run(server + " --spin-us 20000");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--spin-us takes at most 10000, got '20000'"), std::string::npos) << out;
  std::tie(out, rc) = run(server + " --max-memory 0");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--max-memory must be more than 0"), std::string::npos) << out;
  std::tie(out, rc) = run(server + " --max-frame lots");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--max-frame expects a size in bytes such as 1048576, 512M or 4G, got "
                     "'lots'"),
            std::string::npos)
      << out;
  std::tie(out, rc) = run(server + " --handshake-timeout 0");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--handshake-timeout expects seconds (> 0, at most 86400)"), std::string::npos)
      << out;
  std::tie(out, rc) = run(server + " --credential-file /nonexistent/key.txt");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("cannot read a credential from the first line of '/nonexistent/key.txt'"),
            std::string::npos)
      << out;
  std::tie(out, rc) = run(server + " --max-sesions 3");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("unknown option '--max-sesions'"), std::string::npos) << out;
  // --help lists every flag, each with its help.
  std::tie(out, rc) = run(server + " --help");
  EXPECT_EQ(rc, 0);
  tw::ServerOptions o;
  o.fields([&](const tw::ServerOption& opt, auto&) {
    EXPECT_NE(out.find(std::string("  ") + opt.flag), std::string::npos) << opt.flag;
  });
}

TEST(EnvVars, ValuesAreParsedAsDeclared) {
  EXPECT_EQ(parse_byte_count("4096"), 4096u);
  EXPECT_EQ(parse_byte_count("4M"), uint64_t{4} << 20);
  EXPECT_EQ(parse_byte_count("1.5GiB"), uint64_t{3} << 29);
  EXPECT_EQ(parse_byte_count("2kB"), 2048u);
  EXPECT_FALSE(parse_byte_count("lots").has_value());
  EXPECT_FALSE(parse_byte_count("-1").has_value());
  EXPECT_FALSE(parse_byte_count("4X").has_value());

  ::setenv("TW_DEDUP_CACHE_BYTES", "64M", 1);
  EXPECT_EQ(env_number(Env::kDEDUP_CACHE_BYTES), uint64_t{64} << 20);
  ::setenv("TW_CONNECT_TIMEOUT_MS", "5s", 1);  // a count, not a duration
  EXPECT_FALSE(env_number(Env::kCONNECT_TIMEOUT_MS).has_value());
  ::setenv("TW_SHM", "0", 1);
  EXPECT_EQ(env_flag(Env::kSHM), false);
  ::setenv("TW_SHM", "", 1);
  EXPECT_FALSE(env_flag(Env::kSHM).has_value());
  ::unsetenv("TW_DEDUP_CACHE_BYTES");
  ::unsetenv("TW_CONNECT_TIMEOUT_MS");
  ::unsetenv("TW_SHM");
}

TEST(EnvVars, AMalformedNumberLeavesTheDefault) {
  const client::Options defaults;
  ::setenv("TW_BATCH_OPS", "many", 1);     // was read as 0, then clamped to 1: one op a frame
  ::setenv("TW_WINDOW_BYTES", "8 MB", 1);  // was read as 8
  ::setenv("TW_BATCH_BYTES", "2M", 1);     // a unit is taken
  const client::Options o = client::Options::from_env();
  ::unsetenv("TW_BATCH_OPS");
  ::unsetenv("TW_WINDOW_BYTES");
  ::unsetenv("TW_BATCH_BYTES");
  EXPECT_EQ(o.batch_ops, defaults.batch_ops);
  EXPECT_EQ(o.window_bytes, defaults.window_bytes);
  EXPECT_EQ(o.batch_bytes, uint64_t{2} << 20);
}

}  // namespace
}  // namespace tw
