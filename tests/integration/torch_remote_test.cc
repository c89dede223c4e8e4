// A server hosting torch devices, and cpu and torch devices side by side (--backend cpu,torch),
// against real server processes on 127.0.0.1 (port 0). Skipped when this build has no torch
// backend.
#include <gtest/gtest.h>

#include <cmath>

#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/server.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::ServerProcess;

#define TW_REQUIRE_TORCH() \
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend"

// A small model step: every kind of kernel (random, matmul, elementwise, reduction, softmax).
std::vector<float> program(const Device& d) {
  manual_seed(7);
  Tensor x = randn({16, 8}, kF32, d);
  Tensor w = randn({8, 4}, kF32, d);
  return (x.matmul(w).relu() * 0.5 + 1.0).log_softmax(-1).sum(0).to_vector<float>();
}

TEST(TorchRemote, ServerHostsCpuAndTorchDevicesAndNamesTheirBackends) {
  TW_REQUIRE_TORCH();
  ServerProcess server({"--backend", "cpu,torch"});
  const std::vector<RemoteDeviceInfo> devs = remote_devices(server.url());
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0].name, "cpu:0");
  EXPECT_EQ(devs[0].backend, "cpu");
  EXPECT_EQ(devs[1].name, "torch:1");
  EXPECT_EQ(devs[1].backend, "torch");

  const Device cpu = Device::remote(server.url(), 0), torch = Device::remote(server.url(), 1);
  const RemoteHandshake h = remote_handshake(torch);
  EXPECT_EQ(h.device_count, 2);
  EXPECT_EQ(h.device.index, 1);
  EXPECT_EQ(h.device.backend, "torch");
  EXPECT_EQ(remote_handshake(cpu).device.backend, "cpu");

  // Each device computes with its own backend: the same bytes as the local device of that
  // backend, and the two backends agree within rounding.
  const std::vector<float> on_cpu = program(cpu), on_torch = program(torch);
  EXPECT_EQ(on_cpu, program(Device::cpu()));
  EXPECT_EQ(on_torch, program(Device::torch()));
  ASSERT_EQ(on_cpu.size(), on_torch.size());
  for (size_t i = 0; i < on_cpu.size(); ++i)
    EXPECT_NEAR(on_cpu[i], on_torch[i], 1e-4 * std::abs(on_cpu[i]));
}

TEST(TorchRemote, TorchOnlyServerAndDataErrors) {
  TW_REQUIRE_TORCH();
  ServerProcess server({"--backend", "torch", "--devices", "2"});
  const std::vector<RemoteDeviceInfo> devs = remote_devices(server.url());
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1].backend, "torch");
  const Device d = Device::remote(server.url(), 1);
  // A data-dependent error on the server's torch backend reaches the read, naming op and value,
  // and the session goes on.
  Tensor bad = zeros({3}, kF32, d).gather(0, from_vector<int64_t>({0, 5}, {2}, d));
  try {
    (void)bad.to_vector<float>();
    FAIL() << "reading a failed gather did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gather: index 5 out of range"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(arange(0, 5, 1, kI64, d).sum().item<int64_t>(), 10);
}

TEST(TorchRemote, InProcessServerOfTheTorchDevice) {
  TW_REQUIRE_TORCH();
  auto server = serve(Device::torch());
  const Device d = Device::remote(server->url());
  EXPECT_EQ(remote_handshake(d).device.backend, "torch");
  EXPECT_EQ(program(d), program(Device::torch()));
}

TEST(TorchRemote, BackendListValidation) {
  ServerOptions opts;
  opts.backend = "cpu,torch";
  opts.devices = 3;
  try {
    auto s = serve(opts);
    FAIL() << "a list of 2 backends with 3 devices must be refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    // Without torch the list fails on its second name instead.
    EXPECT_TRUE(m.find("names 2 devices but --devices is 3") != std::string::npos ||
                m.find("no torch backend") != std::string::npos)
        << m;
  }
  opts.backend = "cpu,npu";
  opts.devices = 1;
  try {
    auto s = serve(opts);
    FAIL() << "an unknown backend must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown backend 'npu' (this build has: cpu"),
              std::string::npos)
        << e.what();
  }
}

TEST(TorchRemote, WithoutTorchTheDeviceSaysSo) {
  if (Device::torch_available()) GTEST_SKIP() << "this build has the torch backend";
  try {
    (void)Device::torch();
    FAIL() << "Device::torch() must throw in a build without libtorch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no torch backend"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tw
