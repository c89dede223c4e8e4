// Command-line flags of the example programs (train_digits, train_lm): one flag at a time, each
// value read and checked the same way, every problem reported through the program's usage().
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace tw::apps {

class Flags {
 public:
  // `usage` prints the problem and the program's usage, then exits: it does not return.
  using Usage = void (*)(const std::string& problem);
  Flags(int argc, char** argv, Usage usage) : argc_(argc), argv_(argv), usage_(usage) {}

  // Moves to the next flag; false when none is left.
  bool next() {
    if (++i_ >= argc_) return false;
    flag_ = argv_[i_];
    return true;
  }
  const std::string& flag() const { return flag_; }
  bool is(const char* name) const { return flag_ == name; }

  // The flag's value (the next argument).
  std::string value() {
    if (i_ + 1 >= argc_) fail(flag_ + " needs a value");
    return argv_[++i_];
  }
  // The value as a number.
  double number() {
    const std::string v = value();
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0') fail(flag_ + ": '" + v + "' is not a number");
    return d;
  }
  // The value as an integer >= lo.
  int64_t count(int64_t lo) {
    const double d = number();
    if (d < static_cast<double>(lo) || d != std::floor(d))
      fail(flag_ + " takes an integer >= " + std::to_string(lo));
    return static_cast<int64_t>(d);
  }
  [[noreturn]] void fail(const std::string& problem) const {
    usage_(problem);
    std::abort();  // usage() exits; this only tells the compiler so
  }

 private:
  int argc_;
  char** argv_;
  Usage usage_;
  int i_ = 0;
  std::string flag_;
};

}  // namespace tw::apps
