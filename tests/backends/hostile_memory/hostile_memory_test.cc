// The hostile_memory backend's own tests (README.md): that its tensors' pages crash any access
// from outside its copy calls, and where a fault it reports asynchronously surfaces, on the
// device itself and behind a real server. The suites that run every registered backend (op
// table, autograd, graphs) run it too, with no edit of theirs.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include "api/sink.h"
#include "backend/registry.h"
#include "support/local_backends.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensor.h"

namespace tw {
namespace {

using AddressFn = const void* (*)(Backend*, uint64_t);

// The module's test hook, from the copy of the module the registry loaded.
AddressFn address_fn() {
  void* handle = ::dlopen(TW_HOSTILE_MEMORY_MODULE, RTLD_NOW | RTLD_NOLOAD);
  if (!handle) return nullptr;
  return reinterpret_cast<AddressFn>(::dlsym(handle, "tw_hostile_memory_address"));
}

// The device with TW_HOSTILE_MEMORY_FAIL_AT=n while it is made.
Device failing_at(int n) {
  ::setenv("TW_HOSTILE_MEMORY_FAIL_AT", std::to_string(n).c_str(), 1);
  Device d = Device::local("hostile_memory");
  ::unsetenv("TW_HOSTILE_MEMORY_FAIL_AT");
  return d;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HostileMemory, TheRegistryFindsItAndEverySuiteRunsIt) {
  const std::vector<std::string> names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "hostile_memory"), names.end());
  const testing::LocalBackend* b = testing::local_backend_named("hostile_memory");
  ASSERT_NE(b, nullptr) << "support/local_backends.h does not list it";
  EXPECT_EQ(b->unavailable, "");
  EXPECT_TRUE(b->complete);
  Result<std::unique_ptr<Backend>> made = make_backend("hostile_memory");
  ASSERT_TRUE(made.ok()) << made.status().message();
  const Backend::Description d = (*made)->describe();
  EXPECT_FALSE(d.host_memory);
  EXPECT_EQ(d.memory_total, uint64_t{2} << 30);
  EXPECT_FALSE(make_backend("hostile_memory:1").ok());
}

TEST(HostileMemory, TouchingATensorsPagesFromOutsideCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<std::unique_ptr<Backend>> made = make_backend("hostile_memory");
  ASSERT_TRUE(made.ok()) << made.status().message();
  Backend& b = **made;
  const std::vector<float> v = {1.5f, -2, 3, 4};
  ASSERT_TRUE(
      b.execute(ir::FromHost{ir::Out{7}, Shape{4}, kF32, ir::Bytes{Buffer::copy_of(v.data(), 16)}})
          .ok());
  const AddressFn address = address_fn();
  ASSERT_NE(address, nullptr) << "the module's test hook is missing";
  const volatile float* p = static_cast<const volatile float*>(address(&b, 7));
  ASSERT_NE(p, nullptr);
  EXPECT_DEATH((void)*p, "");
  // Its own copy calls still see the bytes.
  Result<TensorData> got = b.read(7);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(std::vector<float>(got->values<float>().begin(), got->values<float>().end()), v);
}

// What each check expects of a device whose 3rd op failed late: the op was accepted; the next
// sync reports it by its number and name, once; every read of what it made, or of what was
// computed from it, names it; work that does not depend on it goes on.
void expect_fault_surfaces(const Device& d) {
  const Tensor a = from_vector<float>({1, 2, 3}, {3}, d);  // op 1
  const Tensor b = from_vector<float>({4, 5, 6}, {3}, d);  // op 2
  Tensor c, e;
  EXPECT_EQ(error_of([&] {
              c = a + b;    // op 3: fails on the device
              e = c.exp();  // op 4: computed from it
            }),
            "");
  const std::string at_sync = error_of([&] { d.sync(); });
  EXPECT_NE(at_sync.find("op 3 (add) failed on the device: injected fault"), std::string::npos)
      << at_sync;
  EXPECT_EQ(error_of([&] { d.sync(); }), "") << "a fault is reported at one sync";
  for (const Tensor* t : {&c, &e}) {
    const std::string at_read = error_of([&] { (void)t->to_vector<float>(); });
    EXPECT_NE(at_read.find("op 3 (add) failed"), std::string::npos) << at_read;
  }
  EXPECT_EQ((a * b).to_vector<float>(), (std::vector<float>{4, 10, 18}));
}

TEST(HostileMemory, AFaultSurfacesAtTheNextSyncAndInReadsNamingTheOp) {
  expect_fault_surfaces(failing_at(3));
}

TEST(HostileMemory, BehindAServerAFaultSurfacesTheSameWay) {
  // The server's device 1, made for this session with the variable the server inherited.
  ::setenv("TW_HOSTILE_MEMORY_FAIL_AT", "3", 1);
  testing::ServerProcess server({"--backend", "cpu,hostile_memory"});
  ::unsetenv("TW_HOSTILE_MEMORY_FAIL_AT");
  const Device d = remote_device(server.urls().at(0), 1, RemoteOptions{});
  expect_fault_surfaces(d);
}

}  // namespace
}  // namespace tw
