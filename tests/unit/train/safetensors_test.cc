// Safetensors (src/api/safetensors.cc): a model round trip through a file, a file assembled by
// hand from the format's specification, and malformed files refused with clear messages.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "digits/digits.h"
#include "support/remote_device.h"
#include "tensorwire/serialize.h"

namespace tw {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("tw_safetensors_" + std::to_string(::getpid()) + "_" + name + ".safetensors"))
      .string();
}

// A file of `header` (padded to 8 bytes with spaces) and `data`, as the spec lays it out.
std::vector<uint8_t> file_of(std::string header, const std::vector<uint8_t>& data,
                             bool pad = true) {
  while (pad && header.size() % 8 != 0) header += ' ';
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + data.size());
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (uint8_t b : data) out.push_back(b);
  return out;
}

template <class T>
void append(std::vector<uint8_t>& data, std::initializer_list<T> values) {
  for (T v : values) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // the test host is little-endian, as the format
    data.insert(data.end(), b, b + sizeof(T));
  }
}

TEST(Safetensors, ModelRoundTripThroughAFile) {
  for (const std::string dev_name : {"cpu", "remote"}) {
    SCOPED_TRACE(dev_name);
    const Device dev = testing::test_device(dev_name);
    manual_seed(11);
    auto model = digits::make_model(digits::ModelKind::kCnn, {dev, kF32});
    const std::string path = temp_path("model_" + dev_name);
    save_safetensors(path, *model, {{"format", "pt"}, {"model", "digits cnn"}});

    manual_seed(12);  // different initial values
    auto other = digits::make_model(digits::ModelKind::kCnn, {dev, kF32});
    ASSERT_NE(other->parameters()[0]->value().to_bytes(),
              model->parameters()[0]->value().to_bytes());
    load_safetensors(path, *other);
    const auto a = model->named_parameters(), b = other->named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].second->value().to_bytes(), b[i].second->value().to_bytes()) << a[i].first;
      EXPECT_EQ(b[i].second->value().device(), dev);
    }
    const Tensor x = rand({2, 1, 8, 8}, kF32, dev);
    EXPECT_EQ((*model)(x).to_bytes(), (*other)(x).to_bytes());

    const Safetensors file = read_safetensors(path);
    EXPECT_EQ(file.metadata.at("model"), "digits cnn");
    std::vector<std::string> names;
    for (const auto& [name, t] : file.tensors) names.push_back(name);
    EXPECT_EQ(names, (std::vector<std::string>{"0.bias", "0.weight", "3.bias", "3.weight", "7.bias",
                                               "7.weight"}));
    EXPECT_EQ(file.tensors.at("3.weight").shape(), (Shape{32, 16, 3, 3}));
    EXPECT_EQ(file.tensors.at("3.weight").dtype(), kF32);
    std::remove(path.c_str());
  }
}

TEST(Safetensors, WrittenLayoutFollowsTheSpec) {
  const std::vector<uint8_t> bytes = safetensors_bytes(
      {{"b", from_vector<int64_t>({7, 8}, {2})}, {"a", tensor<float>({1.5f})}}, {{"k", "v"}});
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[static_cast<size_t>(i)]} << (8 * i);
  EXPECT_EQ((8 + n) % 8, 0u) << "data starts 8-byte aligned";
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(n));
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            "{\"__metadata__\":{\"k\":\"v\"},\"b\":{\"dtype\":\"I64\",\"shape\":[2],\"data_"
            "offsets\":[0,16]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[16,20]}}");
  EXPECT_EQ(bytes.size(), 8 + n + 20);
}

TEST(Safetensors, HandAssembledFile) {
  // Tensors out of order in the header relative to their data, every dtype, a 0-d and an empty
  // tensor, escapes in a name, whitespace inside the JSON and padding after it. (The spec
  // requires the header's first byte to be '{'.)
  std::vector<uint8_t> data;
  append<float>(data, {1.5f, -2.0f, 3.25f, 0.0f, 5.0f, -6.5f});  // w  F32 [2, 3]   0..24
  append<double>(data, {3.141592653589793});                     // pi F64 []       24..32
  append<int32_t>(data, {-1, 2147483647});                       // i  I32 [2]      32..40
  append<int64_t>(data, {-9007199254740993LL});                  // l  I64 [1, 1]   40..48
  append<uint8_t>(data, {0, 255, 7});                            // u  U8 [3]       48..51
  append<uint8_t>(data, {1, 0});                                 // m  BOOL [2]     51..53
  append<uint16_t>(data, {0x3C00, 0xC000});                      // h  F16 [2] 1,-2 53..57
  append<uint16_t>(data, {0x3F80});                              // bf BF16 [1] 1   57..59
  const std::string header =
      "{\n"
      "  \"l\": {\"dtype\": \"I64\", \"shape\": [1, 1], \"data_offsets\": [40, 48]},\n"
      "  \"w\": {\"shape\": [2, 3], \"dtype\": \"F32\", \"data_offsets\": [0, 24]},\n"
      "  \"__metadata__\": {\"note\": \"caf\\u00e9 \\ud83d\\ude00\", \"empty\": \"\"},\n"
      "  \"pi\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [24, 32]},\n"
      "  \"i\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [32, 40]},\n"
      "  \"u\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [48, 51]},\n"
      "  \"none\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"data_offsets\": [51, 51]},\n"
      "  \"m\": {\"dtype\": \"BOOL\", \"shape\": [2], \"data_offsets\": [51, 53]},\n"
      "  \"h\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [53, 57]},\n"
      "  \"layer.\\\"q\\\"\\/\\u0041\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": "
      "[57, 59]}\n"
      "}";
  const std::string path = temp_path("hand");
  {
    const std::vector<uint8_t> bytes = file_of(header, data);
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }
  const Safetensors f = read_safetensors(path);
  std::remove(path.c_str());
  ASSERT_EQ(f.tensors.size(), 9u);
  EXPECT_EQ(f.metadata.at("note"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(f.metadata.at("empty"), "");
  const Tensor& w = f.tensors.at("w");
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 5.0f, -6.5f}));
  EXPECT_EQ(f.tensors.at("pi").shape(), Shape{});
  EXPECT_EQ(f.tensors.at("pi").item<double>(), 3.141592653589793);
  EXPECT_EQ(f.tensors.at("i").to_vector<int32_t>(), (std::vector<int32_t>{-1, 2147483647}));
  EXPECT_EQ(f.tensors.at("l").shape(), (Shape{1, 1}));
  EXPECT_EQ(f.tensors.at("l").item<int64_t>(), -9007199254740993LL);
  EXPECT_EQ(f.tensors.at("u").to_vector<uint8_t>(), (std::vector<uint8_t>{0, 255, 7}));
  EXPECT_EQ(f.tensors.at("none").shape(), (Shape{0, 4}));
  EXPECT_EQ(f.tensors.at("m").dtype(), kBool);
  EXPECT_EQ(f.tensors.at("m").to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(f.tensors.at("h").dtype(), kF16);
  EXPECT_EQ(f.tensors.at("h").to(kF32).to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  const Tensor& bf = f.tensors.at("layer.\"q\"/A");
  EXPECT_EQ(bf.dtype(), kBF16);
  EXPECT_EQ(bf.to(kF32).item<float>(), 1.0f);

  // Written back and read again: the same tensors.
  NamedTensors all(f.tensors.begin(), f.tensors.end());
  const Safetensors again = parse_safetensors(safetensors_bytes(all, f.metadata));
  EXPECT_EQ(again.metadata, f.metadata);
  for (const auto& [name, t] : f.tensors) {
    EXPECT_EQ(again.tensors.at(name).to_bytes(), t.to_bytes()) << name;
    EXPECT_EQ(again.tensors.at(name).shape(), t.shape()) << name;
  }
}

TEST(Safetensors, LoadsOntoARemoteDevice) {
  const Device dev = testing::remote_test_device();
  const std::vector<uint8_t> bytes = safetensors_bytes({{"x", arange(0, 6).reshape({2, 3})}});
  const Safetensors f = parse_safetensors(bytes, dev);
  EXPECT_EQ(f.tensors.at("x").device(), dev);
  EXPECT_EQ(f.tensors.at("x").to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::string& part) {
  try {
    parse_safetensors(bytes, Device::cpu(), "f.safetensors");
    ADD_FAILURE() << "accepted; wanted an error containing: " << part;
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("f.safetensors: ", 0), 0u) << m;
    EXPECT_NE(m.find(part), std::string::npos) << m;
  }
}

TEST(Safetensors, MalformedFilesAreRefused) {
  const std::string ok_entry = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
  const std::vector<uint8_t> eight(8, 0);
  // Sizes.
  expect_refused({1, 2, 3}, "3 bytes is too short");
  expect_refused({0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, '{', '}'},
                 "header length 1099511627775 is absurd");
  {
    std::vector<uint8_t> b = file_of("{" + ok_entry + "}", eight);
    b.resize(20);
    expect_refused(b, "runs past the end of the 20-byte file");
  }
  expect_refused(file_of("{" + ok_entry + "}", std::vector<uint8_t>(4, 0)),
                 "run past the 4-byte data section");
  expect_refused(file_of("{" + ok_entry + "}", std::vector<uint8_t>(12, 0)),
                 "the data section but it has 12 bytes");
  // JSON.
  expect_refused(file_of("[1, 2]", {}), "must start with '{'");
  expect_refused(file_of(" {}", {}), "must start with '{'");
  expect_refused(file_of("{\"a\": }", {}), "not valid JSON");
  expect_refused(file_of("{" + ok_entry + ",}", eight), "not valid JSON: expected a string key");
  expect_refused(file_of("{" + ok_entry + "} x", eight), "after the JSON value");
  expect_refused(
      file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", eight),
      "not valid JSON");
  expect_refused(file_of("{\"a\\ud800\":1}", {}), "unpaired surrogate");
  expect_refused(file_of("{\"a\tb\":1}", {}), "control character");
  expect_refused(file_of("{\"x\":" + std::string(100, '[') + std::string(100, ']') + "}", {}),
                 "nesting deeper than 64");
  expect_refused(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", eight),
                 "not valid JSON");
  // Entries.
  expect_refused(file_of("{" + ok_entry + "," + ok_entry + "}", eight), "\"a\" appears twice");
  expect_refused(file_of("{\"a\":{\"dtype\":\"I16\",\"shape\":[4],\"data_offsets\":[0,8]}}", eight),
                 "dtype I16 is not supported");
  expect_refused(
      file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", eight),
      "shape entry must be a non-negative integer");
  expect_refused(
      file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", eight),
      "shape entry must be a non-negative integer");
  expect_refused(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", eight),
                 "hold 8 bytes but F32 [3] needs 12");
  expect_refused(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", eight),
                 "needs dtype, shape and data_offsets");
  expect_refused(
      file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", eight),
      "unknown field \"x\"");
  expect_refused(file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", eight),
                 "end before they begin");
  expect_refused(
      file_of("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}",
              eight),
      "too large");
  expect_refused(file_of("{\"__metadata__\":{\"k\":1}}", {}), "value of \"k\" must be a string");
  expect_refused(file_of("{\"a\":[1]}", {}),
                 "must be an object with dtype, shape and data_offsets");
  // Offsets that overlap or leave gaps.
  expect_refused(
      file_of("{" + ok_entry + ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
              std::vector<uint8_t>(12, 0)),
      "overlap the previous tensor's (which ends at 8)");
  expect_refused(file_of("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", eight),
                 "leaving bytes [0, 4) unused");
  // Files that cannot be opened.
  EXPECT_THROW(load_safetensors("/nonexistent/dir/x.safetensors"), Error);
}

TEST(Safetensors, SaveRefusesBadNames) {
  EXPECT_THROW(safetensors_bytes({{"a", zeros({1})}, {"a", zeros({1})}}), Error);
  EXPECT_THROW(safetensors_bytes({{"__metadata__", zeros({1})}}), Error);
}

TEST(Safetensors, LoadIntoModuleChecksNamesAndShapes) {
  manual_seed(1);
  nn::Sequential mlp(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2));
  const std::string path = temp_path("mismatch");
  save_safetensors(path, {{"0.weight", zeros({3, 4})}, {"0.bias", zeros({3})}});
  EXPECT_THROW(load_safetensors(path, mlp), Error);  // strict: 2.weight and 2.bias are missing
  load_safetensors(path, mlp, /*strict=*/false);
  EXPECT_EQ(mlp.named_parameters()[0].second->value().to_vector<float>(),
            std::vector<float>(12, 0.0f));
  save_safetensors(path, {{"0.weight", zeros({4, 3})}});
  EXPECT_THROW(load_safetensors(path, mlp, false), Error);  // wrong shape
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tw
