// The worked examples of docs/protocol.md, for the protocol tests that check them against the
// encoder byte for byte.
#pragma once
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "support/frames.h"

namespace tw::testing {

// The text of docs/protocol.md in `docs_dir` ("" when it cannot be read).
inline std::string read_protocol_doc(const std::string& docs_dir) {
  std::ifstream in(docs_dir + "/protocol.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The bytes of the fenced block after `<!-- example: name -->`: the hex tokens of each line
// before its `#` comment.
inline std::vector<uint8_t> doc_example(const std::string& doc, const std::string& name) {
  size_t at = doc.find("<!-- example: " + name + " -->");
  if (at == std::string::npos) return {};
  size_t open = doc.find("```\n", at);
  size_t close = doc.find("\n```", open + 4);
  std::istringstream lines(doc.substr(open + 4, close - open - 4));
  std::vector<uint8_t> out;
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream toks(line.substr(0, line.find('#')));
    std::string t;
    while (toks >> t) out.push_back(static_cast<uint8_t>(std::stoul(t, nullptr, 16)));
  }
  return out;
}

// A frame as it goes on the wire: the u32 length, then the payload.
inline std::vector<uint8_t> framed(const protocol::OutFrame& f) {
  std::vector<uint8_t> out = flatten(f);
  uint64_t n = out.size();
  for (int i = 3; i >= 0; --i) out.insert(out.begin(), static_cast<uint8_t>(n >> (8 * i)));
  return out;
}

}  // namespace tw::testing
