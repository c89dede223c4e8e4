// The op codec, printer, equality and hash (src/ir/codec.cc, printer.cc, ops.cc): every op
// round-trips, and no byte string a peer can send makes the decoder crash.
#include "ir/codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "ir/printer.h"
#include "support/op_program.h"

namespace tw::ir {
namespace {

Bytes bytes_of(const std::string& s) { return Bytes{Buffer::copy_of(s.data(), s.size())}; }

// The shared program over every op (tests/support/op_program.h): the first op of each code has
// every field set to something other than its default.
std::vector<Op> samples() { return testing::every_op_program(); }

// Each field of an op as (name, printed value), for comparing a sample with a default op.
struct FieldDump {
  std::vector<std::pair<std::string, std::string>>* out;
  template <class T>
  void operator()(const char* name, const T& v) const {
    std::string s;
    if constexpr (std::is_same_v<T, In> || std::is_same_v<T, Out>) {
      s = std::to_string(v.id);
    } else if constexpr (std::is_same_v<T, std::vector<In>>) {
      for (const In& x : v) s += std::to_string(x.id) + ",";
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      s = shape_str(v);
    } else if constexpr (std::is_same_v<T, Scalar>) {
      s = (v.is_float ? "f" : "i") + (v.is_float ? std::to_string(v.f) : std::to_string(v.i));
    } else if constexpr (std::is_same_v<T, Bytes>) {
      s = std::string(reinterpret_cast<const char*>(v.data.data()), v.data.size());
    } else if constexpr (std::is_same_v<T, double>) {
      s = std::to_string(v);
    } else {
      s = std::to_string(static_cast<int64_t>(v));  // integers, bool, DType and kind enums
    }
    out->emplace_back(name, s);
  }
};

std::vector<std::pair<std::string, std::string>> dump(const Op& op) {
  std::vector<std::pair<std::string, std::string>> fields;
  std::visit(
      [&](const auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>) {
          o.fields(FieldDump{&fields});
        }
      },
      op);
  return fields;
}

Op default_of(const Op& op) {
  return std::visit([](const auto& o) -> Op { return std::decay_t<decltype(o)>{}; }, op);
}

TEST(Codec, ProgramCoversEveryOpWithNonDefaultFields) {
  std::set<OpCode> codes;
  for (const Op& op : samples()) {
    if (!codes.insert(op_code(op)).second) continue;  // later ops of a code may keep defaults
    const auto got = dump(op), def = dump(default_of(op));
    ASSERT_EQ(got.size(), def.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NE(got[i].second, def[i].second)
          << to_string(op) << ": field " << got[i].first << " has its default value";
    }
  }
  // Walks the declaration, so the failure names the op that lacks a sample.
#define TW_CHECK_SAMPLE(Name, code, since)  \
  EXPECT_TRUE(codes.count(OpCode::k##Name)) \
      << "op " #Name " has no instance in every_op_program() of tests/support/op_program.h";
  TW_OP_LIST(TW_CHECK_SAMPLE)
#undef TW_CHECK_SAMPLE
}

// The fuzz seeds need the program valid: each op infers against what the ops before it made.
TEST(Codec, ProgramInfersInOrder) {
  Status st = testing::infer_in_order(samples());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(Codec, EveryOpRoundTrips) {
  for (const Op& op : samples()) {
    const std::vector<uint8_t> bytes = encode_op(op);
    Result<Op> back = decode_op(bytes.data(), bytes.size());
    ASSERT_TRUE(back.ok()) << to_string(op) << ": " << back.status().to_string();
    EXPECT_TRUE(*back == op) << to_string(op) << " came back as " << to_string(*back);
    EXPECT_EQ(op_hash(*back), op_hash(op)) << to_string(op);
    EXPECT_EQ(encode_op(*back), bytes) << to_string(op);
  }
}

TEST(Codec, EveryStrictPrefixIsAnError) {
  for (const Op& op : samples()) {
    const std::vector<uint8_t> bytes = encode_op(op);
    for (size_t n = 0; n < bytes.size(); ++n) {
      // A copy of exactly n bytes, so that reading past it is caught by ASan as well.
      const std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
      Result<Op> r = decode_op(prefix.data(), prefix.size());
      EXPECT_FALSE(r.ok()) << to_string(op) << " decoded from " << n << " of " << bytes.size()
                           << " bytes";
    }
  }
}

TEST(Codec, TrailingBytesAreAnError) {
  for (const Op& op : samples()) {
    std::vector<uint8_t> bytes = encode_op(op);
    bytes.push_back(0);
    Result<Op> r = decode_op(bytes.data(), bytes.size());
    ASSERT_FALSE(r.ok()) << to_string(op);
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("1 trailing bytes after " + op_name(op)), std::string::npos)
        << r.status().to_string();
  }
}

TEST(Codec, UnknownOpCodeIsAnErrorNamingIt) {
  for (uint16_t code : {uint16_t{0}, uint16_t{999}, uint16_t{0xFFFF}}) {
    const uint8_t bytes[] = {static_cast<uint8_t>(code & 0xFF), static_cast<uint8_t>(code >> 8)};
    Result<Op> r = decode_op(bytes, sizeof(bytes));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("unknown op code " + std::to_string(code)),
              std::string::npos)
        << r.status().to_string();
  }
}

TEST(Codec, InvalidFieldValuesAreErrors) {
  // Bytes that would otherwise decode, with one field made invalid.
  struct Case {
    Op op;
    size_t offset;  // of the byte to corrupt
    uint8_t value;
    std::string want;
  };
  const std::vector<Case> cases = {
      {Cast{.x = {1}, .dtype = kF32, .out = {2}}, 2 + 8, 9, "Cast.dtype: unknown dtype code 9"},
      {Unary{.kind = UnaryKind::kExp, .x = {1}, .out = {2}}, 2, 21,
       "Unary.kind: unknown kind code 21"},
      {Softmax{.x = {1}, .dim = 0, .log = false, .out = {2}}, 2 + 8 + 8, 2,
       "Softmax.log: bool byte 2 is not 0 or 1"},
      {Full{.out = {1}, .shape = {}, .dtype = kF32, .value = 1}, 2 + 8 + 4 + 1, 2,
       "Full.value: scalar tag 2 is not 0 or 1"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bytes = encode_op(c.op);
    ASSERT_LT(c.offset, bytes.size());
    bytes[c.offset] = c.value;
    Result<Op> r = decode_op(bytes.data(), bytes.size());
    ASSERT_FALSE(r.ok()) << to_string(c.op);
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().to_string();
  }
}

// Random and mutated byte strings must never crash the decoder (run under ASan/UBSan in the
// sanitizer build). When one does decode, re-encoding must give back the same bytes: the
// encoding is canonical, so nothing was silently dropped or altered.
TEST(Codec, RandomBytesNeverCrash) {
  std::mt19937 rng(20240611);
  const std::vector<Op> ops = samples();
  std::vector<std::vector<uint8_t>> encodings;
  for (const Op& op : ops) encodings.push_back(encode_op(op));
  int decoded = 0;
  for (int iter = 0; iter < 10000; ++iter) {
    std::vector<uint8_t> bytes;
    switch (iter % 3) {
      case 0: {  // pure noise
        bytes.resize(rng() % 64);
        for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
        break;
      }
      case 1: {  // a valid op code, then noise
        const uint16_t code = static_cast<uint16_t>(1 + rng() % kNumOps);
        bytes = {static_cast<uint8_t>(code & 0xFF), static_cast<uint8_t>(code >> 8)};
        bytes.resize(2 + rng() % 96);
        for (size_t i = 2; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(rng());
        break;
      }
      default: {  // a valid encoding with a few bytes changed
        bytes = encodings[rng() % encodings.size()];
        for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
          bytes[2 + rng() % (bytes.size() - 2)] = static_cast<uint8_t>(rng());
        }
        break;
      }
    }
    Result<Op> r = decode_op(bytes.data(), bytes.size());
    if (r.ok()) {
      ++decoded;
      EXPECT_EQ(encode_op(*r), bytes) << to_string(*r);
    }
  }
  // The mutated encodings are mostly still valid, so the success path was exercised too.
  EXPECT_GT(decoded, 100);
}

TEST(Printer, PrintsNameAndFields) {
  EXPECT_EQ(to_string(MatMul{.a = {3}, .b = {4}, .out = {5}}), "matmul(a=%3, b=%4, out=%5)");
  EXPECT_EQ(to_string(Conv2d{.x = {1}, .w = {2}, .bias = {}, .out = {3}}),
            "conv2d(x=%1, w=%2, bias=none, stride=[1, 1], padding=[0, 0], dilation=[1, 1], "
            "groups=1, out=%3)");
}

TEST(OpEquality, EqualOpsHashEqual) {
  for (const Op& op : samples()) {
    const Op copy = op;
    EXPECT_TRUE(copy == op) << to_string(op);
    EXPECT_EQ(op_hash(copy), op_hash(op)) << to_string(op);
    // A different op of the same kind (default fields) is not equal.
    EXPECT_FALSE(default_of(op) == op) << to_string(op);
  }
  // Two independently built FromHost ops with the same bytes in different buffers are equal.
  const Op a = FromHost{.out = {1}, .shape = {2}, .dtype = kU8, .data = bytes_of("xy")};
  const Op b = FromHost{.out = {1}, .shape = {2}, .dtype = kU8, .data = bytes_of("xy")};
  EXPECT_TRUE(a == b);
  EXPECT_EQ(op_hash(a), op_hash(b));
  EXPECT_FALSE(a == Op(FromHost{.out = {1}, .shape = {2}, .dtype = kU8, .data = bytes_of("xz")}));
  EXPECT_FALSE(Op(MatMul{.a = {1}, .b = {2}, .out = {3}}) ==
               Op(MatMul{.a = {2}, .b = {1}, .out = {3}}));
}

}  // namespace
}  // namespace tw::ir
