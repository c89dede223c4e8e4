// tw::Checkpoint: a round trip is bit-identical on every device; training resumed from a
// checkpoint ends with the same parameters as an uninterrupted run; a damaged newest checkpoint
// is skipped; and a writer killed (SIGKILL) at random moments never leaves a checkpoint that loads
// wrong (the writer is this binary, re-executed with TW_CKPT_WRITER_DIR set).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "digits/digits.h"
#include "support/remote_device.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("tw_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor*>& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor* t : ts) out.push_back(t->defined() ? t->to_bytes() : std::vector<uint8_t>{});
  return out;
}

std::vector<std::vector<uint8_t>> param_bytes(const nn::Module& m) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p->value().to_bytes());
  return out;
}

const digits::Dataset& train_set() {
  static const digits::Dataset d =
      digits::split(digits::load(digits::default_path()), 360, 7).first;
  return d;
}

class OnDevice : public ::testing::TestWithParam<std::string> {
 protected:
  Device device() const {
    return GetParam() == "cpu" ? Device::cpu() : testing::remote_test_device();
  }
};

TEST_P(OnDevice, RoundTripIsBitIdentical) {
  const Device d = device();
  const std::string dir = fresh_dir("round_trip_" + GetParam());
  manual_seed(3);
  auto model = digits::make_model(digits::ModelKind::kMlp, {d, kF32});
  optim::Adam opt(model->parameters(), {.lr = 1e-2});
  const Tensor x = randn({8, 64}, kF32, d);
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    (*model)(x).square().mean().backward();
    opt.step();
  }
  (void)randn({2}, kF32, d);  // the generator moves on
  const RngState rng = rng_state();
  Checkpoint ckpt(dir);
  const CheckpointInfo saved = ckpt.save(3, *model, &opt, {{"note", "three steps"}});

  manual_seed(99);  // a different model and generator state, then loaded over
  auto other = digits::make_model(digits::ModelKind::kMlp, {d, kF32});
  optim::Adam other_opt(other->parameters(), {.lr = 1e-2});
  const std::optional<CheckpointInfo> info = ckpt.restore(*other, &other_opt);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->step, 3);
  EXPECT_EQ(info->extra.at("note"), "three steps");
  EXPECT_EQ(info->bytes, saved.bytes);
  EXPECT_EQ(rng_state().seed, rng.seed);
  EXPECT_EQ(rng_state().counter, rng.counter);
  EXPECT_EQ(param_bytes(*other), param_bytes(*model));
  EXPECT_EQ(bytes_of(other_opt.state()), bytes_of(opt.state()));
  for (const auto& [name, p] : other->named_parameters()) EXPECT_EQ(p->value().device(), d);
  // One more step on each: still the same.
  for (auto [m, o] : {std::pair{model.get(), &opt}, std::pair{other.get(), &other_opt}}) {
    o->zero_grad();
    (*m)(x).square().mean().backward();
    o->step();
  }
  EXPECT_EQ(param_bytes(*other), param_bytes(*model));
  fs::remove_all(dir);
}

TEST_P(OnDevice, ResumedTrainingEqualsUninterrupted) {
  const Device d = device();
  digits::ResumableOptions o;
  o.epochs = 2;
  o.batch = 128;
  const std::vector<std::vector<uint8_t>> whole =
      param_bytes(*digits::train_resumable(train_set(), d, o).model);

  o.checkpoint_dir = fresh_dir("resume_" + GetParam());
  o.checkpoint_every = 4;
  o.after_step = [](int64_t step) {
    if (step == 14) throw Error("interrupted at step 14");
  };
  EXPECT_THROW(digits::train_resumable(train_set(), d, o), Error);
  o.after_step = nullptr;
  const digits::ResumableRun resumed = digits::train_resumable(train_set(), d, o);
  EXPECT_EQ(resumed.resumed_from, 12);
  EXPECT_EQ(resumed.steps_run, resumed.total_steps - 12);
  EXPECT_EQ(param_bytes(*resumed.model), whole);
  fs::remove_all(o.checkpoint_dir);
}

INSTANTIATE_TEST_SUITE_P(Devices, OnDevice, ::testing::Values("cpu", "remote"));

TEST(Checkpoint, DamagedNewestIsSkippedAndRefused) {
  const std::string dir = fresh_dir("damaged");
  manual_seed(1);
  nn::Linear lin(4, 3);
  Checkpoint ckpt(dir, 3);
  ckpt.save(1, lin);
  const std::vector<std::vector<uint8_t>> first = param_bytes(lin);
  {
    NoGradGuard g;
    lin.weight()->set(lin.weight()->value() + 1.0);
  }
  const CheckpointInfo second = ckpt.save(2, lin);
  EXPECT_EQ(ckpt.list().size(), 2u);
  {
    std::fstream f(second.data, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(second.bytes - 3));
    f.put('\x7f');
  }
  const std::optional<CheckpointInfo> latest = ckpt.latest();
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 1);
  try {
    ckpt.load(second, lin);
    ADD_FAILURE() << "a damaged checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match its manifest"), std::string::npos)
        << e.what();
  }
  ckpt.load(*latest, lin);
  EXPECT_EQ(param_bytes(lin), first);
  // A model of another shape is refused before anything changes.
  nn::Linear wrong(5, 3);
  EXPECT_THROW(ckpt.load(*latest, wrong), Error);
  fs::remove_all(dir);
}

TEST(Checkpoint, KeepsTheNewest) {
  const std::string dir = fresh_dir("keep");
  nn::Linear lin(2, 2);
  Checkpoint ckpt(dir, 2);
  for (int s = 1; s <= 5; ++s) ckpt.save(s, lin);
  const std::vector<CheckpointInfo> all = ckpt.list();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 4);
  EXPECT_EQ(all[1].step, 5);
  fs::remove_all(dir);
}

// The content of checkpoint `step` in the crash test: every value says which step wrote it.
constexpr int64_t kCrashFloats = 1 << 20;  // 4 MiB per checkpoint: writes take a while
void fill(nn::Linear& lin, int64_t step) {
  NoGradGuard g;
  lin.weight()->set(full({kCrashFloats / 1024, 1024}, static_cast<double>(step)));
}

// The writer (run only as the crash test's child): saves checkpoints 1, 2, 3, ... until killed.
TEST(CheckpointCrash, Writer) {
  const char* dir = std::getenv("TW_CKPT_WRITER_DIR");
  if (dir == nullptr) GTEST_SKIP() << "the crash test's writer process";
  nn::Linear lin(1024, kCrashFloats / 1024, false);
  Checkpoint ckpt(dir, 2);
  int64_t step = ckpt.latest() ? ckpt.latest()->step : 0;
  std::printf("\nwriting\n");  // the parent's cue
  std::fflush(stdout);
  for (;;) {
    fill(lin, ++step);
    ckpt.save(step, lin);
  }
}

TEST(CheckpointCrash, KilledWriterNeverLeavesABadCheckpoint) {
  if (std::getenv("TW_CKPT_WRITER_DIR") != nullptr) GTEST_SKIP();
  const std::string dir = fresh_dir("crash");
  std::mt19937_64 rng(20261206);
  constexpr int kKills = 12;
  int64_t newest = 0;
  int mid_write = 0;  // kills that left a temporary file: the writer was inside a write
  // The child's environment and arguments, made before fork (the child of a multithreaded
  // process may only make async-signal-safe calls).
  std::vector<std::string> env_strings = {"TW_CKPT_WRITER_DIR=" + dir};
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (int k = 0; k < kKills; ++k) {
    int out[2];
    ASSERT_EQ(::pipe(out), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execle("/proc/self/exe", "writer", "--gtest_filter=CheckpointCrash.Writer", nullptr,
               envp.data());
      _exit(127);
    }
    ::close(out[1]);
    // Once it writes, somewhere in its next few checkpoints (each a few ms).
    std::string seen;
    char buf[256];
    while (seen.find("writing\n") == std::string::npos) {
      const ssize_t n = ::read(out[0], buf, sizeof(buf));
      if (n <= 0) break;
      seen.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    ASSERT_NE(seen.find("writing\n"), std::string::npos) << "the writer did not start: " << seen;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 150000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer ended on its own";
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      mid_write += e.path().filename().string().rfind(".ckpt-tmp-", 0) == 0;
    Checkpoint ckpt(dir, 2);
    const std::optional<CheckpointInfo> latest = ckpt.latest();
    if (!latest) continue;  // killed before its first commit
    EXPECT_GE(latest->step, newest) << "a committed checkpoint went missing";
    newest = latest->step;
    nn::Linear lin(1024, kCrashFloats / 1024, false);
    ckpt.load(*latest, lin);
    const std::vector<float> v = lin.weight()->value().to_vector<float>();
    ASSERT_EQ(static_cast<int64_t>(v.size()), kCrashFloats);
    for (float x : v) ASSERT_EQ(x, static_cast<float>(latest->step));
  }
  EXPECT_GT(newest, 0) << "no checkpoint was ever committed";
  EXPECT_GT(mid_write, 0) << "no kill landed inside a write";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tw
