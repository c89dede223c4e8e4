// Collectives (tensorwire/dist.h) against real server processes on 127.0.0.1 (port 0): across
// 2 and 3 servers (Gloo, the rendezvous on the first server), on 2 devices of one server (a
// reduction inside it), and a participant that dies.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "digits/digits.h"
#include "support/helpers.h"
#include "support/server_process.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

using testing::read_error;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;
using dist::ReduceOp;

// Integer values, so that any order of a sum gives the same floats as the reference.
Tensor ints(int64_t n, int seed, DType dtype, const Device& d) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>((i * 7 + seed * 13) % 101 - 50);
  return from_vector<float>(v, {n}, d).to(dtype);
}

std::vector<uint8_t> bytes(const Tensor& t) { return t.to_bytes(); }

struct Servers {
  explicit Servers(int n, std::vector<std::string> args = {}) {
    for (int i = 0; i < n; ++i) procs.push_back(std::make_unique<ServerProcess>(args));
    for (auto& p : procs) devices.push_back(Device::remote(p->url(), 0));
  }
  std::vector<std::unique_ptr<ServerProcess>> procs;
  std::vector<Device> devices;
};

// The four collectives on `devices`, each against the same computation on the CPU device.
void check_all_four(const std::vector<Device>& devices) {
  const size_t n = devices.size();
  const int64_t len = 6 * static_cast<int64_t>(n);
  dist::Group group(devices);
  std::vector<Tensor> cpu_in;
  for (size_t i = 0; i < n; ++i)
    cpu_in.push_back(ints(len, static_cast<int>(i), kF32, Device::cpu()));
  auto on_devices = [&] {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < n; ++i) ts.push_back(cpu_in[i].to(devices[i]));
    return ts;
  };
  Tensor sum = cpu_in[0], mx = cpu_in[0];
  for (size_t i = 1; i < n; ++i) {
    sum = sum + cpu_in[i];
    mx = mx.maximum(cpu_in[i]);
  }
  std::vector<Tensor> ts = on_devices();
  dist::all_reduce(ts, ReduceOp::kSum, group);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(ts[i].device(), devices[i]);
    EXPECT_EQ(bytes(ts[i]), bytes(sum)) << "all_reduce sum, participant " << i;
  }
  ts = on_devices();
  dist::all_reduce(ts, ReduceOp::kMax, group);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bytes(ts[i]), bytes(mx)) << "max, participant " << i;
  ts = on_devices();
  dist::all_reduce(ts, ReduceOp::kMean, group);
  const Tensor mean = sum / static_cast<double>(n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bytes(ts[i]), bytes(mean)) << "mean, participant " << i;
  ts = on_devices();
  dist::broadcast(ts, n - 1, group);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(bytes(ts[i]), bytes(cpu_in[n - 1])) << "broadcast " << i;
  ts = on_devices();
  dist::all_gather(ts, group);
  const Tensor gathered = cat(cpu_in, 0);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(ts[i].shape(), gathered.shape());
    EXPECT_EQ(bytes(ts[i]), bytes(gathered)) << "all_gather " << i;
  }
  ts = on_devices();
  dist::reduce_scatter(ts, ReduceOp::kSum, group);
  const int64_t part = len / static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(bytes(ts[i]), bytes(sum.narrow(0, static_cast<int64_t>(i) * part, part)))
        << "reduce_scatter " << i;
  }
}

TEST(Dist, AllFourAcrossTwoServers) {
  Servers s(2);
  check_all_four(s.devices);
}

TEST(Dist, AllFourAcrossThreeServers) {
  Servers s(3);
  check_all_four(s.devices);
}

TEST(Dist, AllFourOnTwoDevicesOfOneServerStayInTheServer) {
  ServerProcess server({"--devices", "2"});
  std::vector<Device> devices = {Device::remote(server.url(), 0), Device::remote(server.url(), 1)};
  check_all_four(devices);
  // A reduction within one server moves the tensors there: the client sends tasks, not bytes.
  std::vector<Tensor> ts = {randn({256, 1024}, kF32, devices[0]),
                            randn({256, 1024}, kF32, devices[1])};
  devices[0].sync();
  devices[1].sync();
  const uint64_t before = wire_counters(devices[0]).bytes_out + wire_counters(devices[0]).bytes_in +
                          wire_counters(devices[1]).bytes_out + wire_counters(devices[1]).bytes_in;
  dist::all_reduce(ts);
  devices[0].sync();
  devices[1].sync();
  const uint64_t after = wire_counters(devices[0]).bytes_out + wire_counters(devices[0]).bytes_in +
                         wire_counters(devices[1]).bytes_out + wire_counters(devices[1]).bytes_in;
  EXPECT_LT(after - before, 4096u) << "1 MiB tensors; the client moved " << after - before;
  EXPECT_EQ(bytes(ts[0]), bytes(ts[1]));
}

TEST(Dist, LocalDevicesReduceInProcess) {
  std::vector<Tensor> ts = {ints(12, 1, kI64, Device::cpu()), ints(12, 2, kI64, Device::cpu())};
  const Tensor want = ts[0] + ts[1];
  dist::all_reduce(ts);
  EXPECT_EQ(bytes(ts[0]), bytes(want));
  EXPECT_EQ(bytes(ts[1]), bytes(want));
}

TEST(Dist, RandomFloatsGiveTheSameBytesOnEveryParticipant) {
  Servers s(3);
  dist::Group group(s.devices);
  manual_seed(11);
  std::vector<Tensor> ts;
  for (const Device& d : s.devices) ts.push_back(randn({3, 100003}, kF32, d));  // uneven chunks
  std::vector<Tensor> again = ts;
  dist::all_reduce(ts, ReduceOp::kSum, group);
  EXPECT_EQ(bytes(ts[0]), bytes(ts[1]));
  EXPECT_EQ(bytes(ts[0]), bytes(ts[2]));
  dist::all_reduce(again, ReduceOp::kSum, group);  // the cached context: the same again
  EXPECT_EQ(bytes(again[2]), bytes(ts[2]));
  // Int dtypes too, and f64.
  std::vector<Tensor> i = {ints(9, 1, kI32, s.devices[0]), ints(9, 2, kI32, s.devices[1]),
                           ints(9, 3, kI32, s.devices[2])};
  const std::vector<Tensor> i0 = {i[0].to(Device::cpu()), i[1].to(Device::cpu()),
                                  i[2].to(Device::cpu())};
  dist::all_reduce(i, ReduceOp::kSum, group);
  EXPECT_EQ(bytes(i[1]), bytes(i0[0] + i0[1] + i0[2]));
}

// A tensor only the list holds is donated (the server reduces in its storage); one that anything
// else still sees, another handle on the client or a view of its storage on the server, is not
// changed by the collective.
TEST(Dist, DonatedInputsNeverChangeWhatOthersSee) {
  Servers s(2);
  dist::Group group(s.devices);
  std::vector<Tensor> ts = {ints(64, 1, kF32, s.devices[0]), ints(64, 2, kF32, s.devices[1])};
  const std::vector<uint8_t> a0 = bytes(ts[0]), a1 = bytes(ts[1]);
  const Tensor sum = ints(64, 1, kF32, Device::cpu()) + ints(64, 2, kF32, Device::cpu());
  const Tensor kept = ts[0];                  // a second handle: not donated
  const Tensor view = ts[1].reshape({8, 8});  // shares the storage on its server
  const void* held1 = ts[1].impl().get();
  dist::all_reduce(ts, ReduceOp::kSum, group);
  EXPECT_EQ(bytes(ts[0]), bytes(sum));
  EXPECT_EQ(bytes(ts[1]), bytes(sum));
  EXPECT_EQ(bytes(kept), a0) << "the kept handle saw the reduction";
  EXPECT_EQ(bytes(view), a1) << "the view on the server saw the reduction";
  EXPECT_EQ(ts[1].impl().get(), held1) << "a tensor only the list held is donated";
  EXPECT_NE(ts[0].impl().get(), kept.impl().get());
  // Donated again and again: the same id, each result right.
  for (int r = 0; r < 3; ++r) dist::all_reduce(ts, ReduceOp::kSum, group);
  Tensor want = sum;
  for (int r = 0; r < 3; ++r) want = want + want;
  EXPECT_EQ(bytes(ts[0]), bytes(want));
  EXPECT_EQ(bytes(ts[1]), bytes(want));
}

// A donated input that failed on its server (over the session's quota here) fails the result
// under its id with the input's error; the other participant fails within the timeout.
TEST(Dist, APoisonedDonatedInputFailsTheResultWithItsError) {
  Servers s(2, {"--session-memory", "4194304"});
  dist::Group group(s.devices, std::chrono::milliseconds(3000));
  const Tensor over = zeros({int64_t{2} << 20}, kF32, s.devices[0]);  // 8 MiB: over the quota
  std::vector<Tensor> ts = {zeros({16}, kF32, s.devices[0]) + over.sum(),
                            zeros({16}, kF32, s.devices[1])};
  dist::all_reduce(ts, ReduceOp::kSum, group);
  EXPECT_NE(read_error(ts[0]).find("quota"), std::string::npos) << read_error(ts[0]);
  EXPECT_NE(read_error(ts[1]), "(no error)");
  // The sessions go on.
  EXPECT_EQ(bytes(ones({3}, kF32, s.devices[1]) + 1), bytes(full({3}, 2.0, kF32, Device::cpu())));
}

TEST(Dist, BadCallsFailAtTheCall) {
  Servers s(2);
  std::vector<Tensor> ts = {zeros({4}, kF32, s.devices[0]), zeros({5}, kF32, s.devices[1])};
  EXPECT_THROW(dist::all_reduce(ts), Error);
  ts = {zeros({4}, kBool, s.devices[0]), zeros({4}, kBool, s.devices[1])};
  try {
    dist::all_reduce(ts);
    ADD_FAILURE() << "a bool all_reduce was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not bool"), std::string::npos) << e.what();
  }
  ts = {zeros({5}, kF32, s.devices[0]), zeros({5}, kF32, s.devices[1])};
  EXPECT_THROW(dist::reduce_scatter(ts), Error);  // 5 does not split in 2
  ts = {zeros({4}, kI32, s.devices[0]), zeros({4}, kI32, s.devices[1])};
  EXPECT_THROW(dist::all_reduce(ts, ReduceOp::kMean), Error);
  EXPECT_THROW(dist::broadcast(ts, 2), Error);
  ts = {zeros({4}, kF32, s.devices[0]), zeros({4}, kF32, s.devices[0])};
  EXPECT_THROW(dist::all_reduce(ts), Error);  // one device twice
}

TEST(Dist, ADeadParticipantFailsTheOthersPromptly) {
  Servers s(3);
  dist::Group group(s.devices, std::chrono::seconds(2));
  std::vector<Tensor> ts;
  for (int i = 0; i < 3; ++i) ts.push_back(ints(1000, i, kF32, s.devices[static_cast<size_t>(i)]));
  dist::all_reduce(ts, ReduceOp::kSum, group);  // connects the group
  ASSERT_EQ(bytes(ts[0]), bytes(ts[2]));
  // Participant 1's server is kept busy, so the others reach the collective first and wait for
  // it; it dies while they wait.
  Tensor w = randn({512, 512}, kF32, s.devices[1]);
  for (int i = 0; i < 40; ++i) w = w.matmul(w) * 1e-3;
  dist::all_reduce(ts, ReduceOp::kSum, group);
  const auto t0 = Clock::now();
  s.procs[1]->kill_hard();
  const std::string e0 = read_error(ts[0]);
  const std::string e2 = read_error(ts[2]);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(e0.find("all_reduce of group"), std::string::npos) << e0;
  EXPECT_NE(e2.find("all_reduce of group"), std::string::npos) << e2;
  EXPECT_LT(waited, 10.0) << "the survivors took " << waited << " s to fail";
  // The survivors' sessions go on.
  EXPECT_EQ((ones({2}, kF32, s.devices[0]) + 1.0).to_vector<float>(), (std::vector<float>{2, 2}));
  // A new group of the survivors works.
  dist::Group fresh({s.devices[0], s.devices[2]}, std::chrono::seconds(1));
  std::vector<Tensor> lone = {ints(10, 0, kF32, s.devices[0]), ints(10, 1, kF32, s.devices[2])};
  dist::all_reduce(lone, ReduceOp::kSum, fresh);
  EXPECT_EQ(bytes(lone[0]), bytes(lone[1]));
}

// Data-parallel training (apps/train_digits --servers N): the replicas on two servers end
// bit-identical, and the loss falls.
TEST(Dist, DataParallelReplicasStayIdentical) {
  Servers s(2);
  const digits::Dataset all = digits::load(digits::default_path());
  const auto [train_set, test_set] = digits::split(all, 360, 7);
  digits::DataParallelTrainer trainer(digits::ModelKind::kCnn, s.devices, train_set, 64, 3e-3, 7);
  trainer.run_epoch(1, 2, 7, 0);
  const std::optional<digits::Progress> first = trainer.finish();
  trainer.run_epoch(2, 2, 7, 0);
  const std::optional<digits::Progress> second = trainer.finish();
  ASSERT_TRUE(first && second);
  EXPECT_LT(second->loss, first->loss);
  EXPECT_TRUE(trainer.differing_parameters().empty());
  // The replicas are still two sets of tensors, one on each server.
  EXPECT_EQ(trainer.model(1).parameters().front()->value().device(), s.devices[1]);
}

}  // namespace
}  // namespace tw
