// hostile_memory: a test-only device that behaves as a GPU does towards the code around it, on
// the CPU, so that every suite can show that nothing outside a backend assumes what a CPU
// backend allows (README.md beside this file):
//  - Its tensors live in pages of their own, mprotect'ed PROT_NONE except inside this file's own
//    copy calls: code anywhere else that touches a tensor's memory through a pointer crashes.
//  - It reports a kernel's failure asynchronously: the op's execute() returns OK, and the error,
//    naming the op, surfaces at the next sync() and in every read of what the op made (or of what
//    was computed from it). TW_HOSTILE_MEMORY_FAIL_AT=N, read when a device is made, fails that
//    device's N-th op (counting execute() and run_graph() calls from 1) that way.
//  - It says it has memory of its own (host_memory false), so a server gives it its own budget.
// The arithmetic is the cpu backend's (an inner cpu backend runs each op on copies of its
// inputs), so its results are the cpu's bits. It is found as any backend module is: this folder's
// hostile_memory.cmake builds it, and nothing outside the folder names it.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/module.h"
#include "backend/registry.h"
#include "backend/upload.h"

namespace tw {
namespace {

constexpr const char* kName = "hostile_memory";
constexpr uint64_t kMemory = uint64_t{2} << 30;  // what it says it has

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// One tensor's pages: inaccessible but inside with_access().
class Pages {
 public:
  Pages() = default;
  Pages(const Pages&) = delete;
  Pages& operator=(const Pages&) = delete;
  Pages(Pages&& o) noexcept { *this = std::move(o); }
  Pages& operator=(Pages&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(mapped_, o.mapped_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~Pages() {
    if (base_) ::munmap(base_, mapped_);
  }

  // `bytes` copied into fresh pages, which are then closed.
  static Result<Pages> holding(const void* bytes, size_t n) {
    Pages p;
    p.size_ = n;
    if (n == 0) return p;
    p.mapped_ = (n + page_size() - 1) / page_size() * page_size();
    void* m = ::mmap(nullptr, p.mapped_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      return resource_exhausted(std::string(kName) + ": cannot map " + std::to_string(n) +
                                " bytes for a tensor: " + std::strerror(errno));
    }
    p.base_ = m;
    TW_RETURN_NOT_OK(p.with_access(PROT_READ | PROT_WRITE, [&] { std::memcpy(m, bytes, n); }));
    return p;
  }
  // A host copy of the bytes.
  Result<Buffer> copy_out() const {
    Buffer b = Buffer::allocate(size_);
    if (size_ == 0) return b;
    TW_RETURN_NOT_OK(with_access(PROT_READ, [&] { std::memcpy(b.data(), base_, size_); }));
    return b;
  }
  const void* address() const { return base_; }
  size_t size() const { return size_; }

 private:
  template <class F>
  Status with_access(int prot, F&& f) const {
    if (::mprotect(base_, mapped_, prot) != 0) {
      return internal_error(std::string(kName) + ": mprotect failed: " + std::strerror(errno));
    }
    f();
    if (::mprotect(base_, mapped_, PROT_NONE) != 0) {
      return internal_error(std::string(kName) + ": mprotect failed: " + std::strerror(errno));
    }
    return Status::OK();
  }

  void* base_ = nullptr;
  size_t mapped_ = 0;
  size_t size_ = 0;
};

struct Entry {
  TensorMeta meta;
  Pages pages;   // live: its bytes
  Status error;  // poisoned: why (pages empty)
};

uint64_t fail_at_from_env() {
  const char* e = std::getenv("TW_HOSTILE_MEMORY_FAIL_AT");
  return e && *e ? std::strtoull(e, nullptr, 10) : 0;
}

class HostileMemoryBackend final : public Backend {
 public:
  explicit HostileMemoryBackend(uint64_t fail_at) : fail_at_(fail_at) {}

  std::string name() const override { return kName; }
  DeviceKind kind() const override { return DeviceKind::kLocal; }
  bool supports(ir::OpCode code) override { return inner_->supports(code); }
  Description describe() override {
    Description d = Backend::describe();  // every dtype, the ops supports() accepts
    d.model = "hostile_memory (a test device: mprotect'ed pages, errors reported late)";
    d.memory_total = kMemory;
    d.memory_free = kMemory - std::min<uint64_t>(kMemory, bytes_held());
    d.host_memory = false;
    return d;
  }

  Status execute(const ir::Op& op) override {
    ++ops_;
    std::vector<ir::TensorId> staged = ir::op_inputs(op);
    const std::vector<ir::TensorId> outs = ir::op_outputs(op);
    staged.insert(staged.end(), outs.begin(), outs.end());  // (a used output id: inner says so)
    std::vector<ir::TensorId> fresh = fresh_ids(outs);
    Status st = stage(staged);
    pass_limit();
    if (st.ok()) st = inner_->execute(op);
    return finish(ir::op_name(op), std::move(st), staged, fresh);
  }

  void set_memory_limit(uint64_t bytes, RefuseFn refuse) override {
    limit_ = bytes;
    refuse_ = std::move(refuse);
    pass_limit();
  }

  void fail(const ir::Op& op, const Status& error) override {
    for (ir::TensorId id : ir::op_outputs(op)) poison(id, TensorMeta{}, error);
  }

  Result<TensorData> read(ir::TensorId id) override {
    TW_ASSIGN_OR_RETURN(const Entry* e, entry(id));
    TW_ASSIGN_OR_RETURN(Buffer bytes, e->pages.copy_out());
    return TensorData{e->meta, std::move(bytes)};
  }
  Status readable(ir::TensorId id) override { return entry(id).status(); }
  Result<TensorMeta> meta(ir::TensorId id) const override {
    auto it = vault_.find(id);
    if (it == vault_.end()) return unknown(id);
    return it->second.meta;
  }
  Status drop(ir::TensorId id) override {
    auto it = vault_.find(id);
    if (it == vault_.end()) return unknown(id);
    held_ -= it->second.pages.size();
    vault_.erase(it);
    return Status::OK();
  }
  // The vault, and the graphs' planned buffers the inner backend keeps (not the copies in transit
  // of a running op's inputs).
  size_t bytes_held() const override { return held_ + inner_->bytes_held() - staged_bytes_; }

  // An asynchronous device's sync: the first failure reported since the last one.
  Status sync() override {
    if (!pending_) return Status::OK();
    Status st = std::move(*pending_);
    pending_.reset();
    return st;
  }

  Result<ir::GraphId> register_graph(ir::Graph graph) override {
    pass_limit();
    return inner_->register_graph(std::move(graph));
  }
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override {
    ++ops_;
    std::vector<ir::TensorId> staged(inputs.begin(), inputs.end());
    staged.insert(staged.end(), outputs.begin(), outputs.end());
    const std::vector<ir::TensorId> outs(outputs.begin(), outputs.end());
    std::vector<ir::TensorId> fresh = fresh_ids(outs);
    Status st = stage(staged);
    pass_limit();
    if (st.ok()) st = inner_->run_graph(graph, inputs, outputs);
    return finish("graph " + std::to_string(graph), std::move(st), staged, fresh);
  }
  Result<GraphMemory> graph_memory(ir::GraphId graph) const override {
    return inner_->graph_memory(graph);
  }

  // For the test that touches a tensor's pages from outside (hostile_memory_test.cc).
  const void* address(ir::TensorId id) const {
    auto it = vault_.find(id);
    return it == vault_.end() ? nullptr : it->second.pages.address();
  }

 private:
  static Status unknown(ir::TensorId id) {
    return not_found("unknown tensor id %" + std::to_string(id));
  }
  Result<const Entry*> entry(ir::TensorId id) const {
    auto it = vault_.find(id);
    if (it == vault_.end()) return unknown(id);
    if (!it->second.error.ok()) return it->second.error;
    return &it->second;
  }
  std::vector<ir::TensorId> fresh_ids(const std::vector<ir::TensorId>& outs) const {
    std::vector<ir::TensorId> fresh;
    for (ir::TensorId id : outs)
      if (id != 0 && !vault_.count(id)) fresh.push_back(id);
    return fresh;
  }
  void poison(ir::TensorId id, const TensorMeta& meta, const Status& error) {
    if (id == 0 || vault_.count(id)) return;  // never overwrite a live tensor
    vault_[id] = Entry{meta, Pages{}, error};
  }

  // The inner backend holds no tensor between ops, only graphs' planned buffers, and while an op
  // runs the copies of its inputs: its limit is what the vault leaves of this device's, plus
  // those copies, so that it asks (and plans graphs' buffers) exactly as a table backend holding
  // the vault's bytes would. Set again before each call, as the vault changes.
  void pass_limit() {
    uint64_t left = limit_ - std::min<uint64_t>(limit_, held_);
    left = left > UINT64_MAX - staged_bytes_ ? UINT64_MAX : left + staged_bytes_;
    if (!refuse_) {
      inner_->set_memory_limit(left, nullptr);
      return;
    }
    inner_->set_memory_limit(left, [this](const ir::Op& op, uint64_t, uint64_t need) {
      return refuse_(op, bytes_held(), need);
    });
  }

  // Copies of the tensors an op names (those the vault has) into the inner backend, a poisoned
  // one as poisoned, so that it runs and fails exactly as the cpu backend would.
  Status stage(const std::vector<ir::TensorId>& ids) {
    inner_->set_memory_limit(UINT64_MAX, nullptr);  // copies in transit, not the device's memory
    for (ir::TensorId id : ids) {
      auto it = vault_.find(id);
      if (it == vault_.end() || inner_->meta(id).ok()) continue;  // unknown, or staged already
      const Entry& e = it->second;
      if (!e.error.ok()) {
        inner_->fail(ir::FromHost{ir::Out{id}, e.meta.shape, e.meta.dtype, ir::Bytes{}}, e.error);
        continue;
      }
      TW_ASSIGN_OR_RETURN(Buffer bytes, e.pages.copy_out());
      staged_bytes_ += bytes.size();
      TW_RETURN_NOT_OK(inner_->execute(from_host_of(TensorData{e.meta, std::move(bytes)}, id)));
    }
    return Status::OK();
  }

  // Takes what the inner backend made for the fresh output ids into the vault (or the error it
  // poisoned them with), applies an injected fault, and leaves the inner backend empty again.
  Status finish(const std::string& what, Status st, const std::vector<ir::TensorId>& staged,
                const std::vector<ir::TensorId>& fresh) {
    const bool fault = ops_ == fail_at_;
    Status injected;
    if (fault) {
      injected = internal_error(std::string(kName) + ": op " + std::to_string(ops_) + " (" + what +
                                ") failed on the device: injected fault " +
                                "(TW_HOSTILE_MEMORY_FAIL_AT=" + std::to_string(fail_at_) +
                                "), reported late as an asynchronous device reports a kernel's "
                                "failure");
    }
    for (ir::TensorId id : fresh) {
      Result<TensorMeta> m = inner_->meta(id);
      if (!m.ok()) continue;  // the op never got as far as its outputs: nothing recorded
      Result<TensorData> data = inner_->read(id);
      if (!fault && data.ok()) {
        Result<Pages> pages = Pages::holding(data->bytes.data(), data->bytes.size());
        if (pages.ok()) {
          held_ += pages->size();
          vault_[id] = Entry{data->meta, std::move(pages).value(), Status::OK()};
          continue;
        }
        data = pages.status();
        if (st.ok()) st = pages.status();
      }
      poison(id, *m, fault && data.ok() ? injected : data.status());
    }
    for (ir::TensorId id : staged) (void)inner_->drop(id);
    for (ir::TensorId id : fresh) (void)inner_->drop(id);
    staged_bytes_ = 0;
    if (fault && st.ok()) {
      // Accepted, as a queued kernel is; its failure shows at the next sync and in the reads.
      if (!pending_) pending_ = injected;
      return Status::OK();
    }
    return st;
  }
  const std::unique_ptr<Backend> inner_ = make_cpu_backend();
  std::unordered_map<ir::TensorId, Entry> vault_;
  size_t held_ = 0;
  size_t staged_bytes_ = 0;  // the inner backend's copies of a running op's inputs
  uint64_t ops_ = 0;
  const uint64_t fail_at_;  // 0: none
  std::optional<Status> pending_;
  uint64_t limit_ = UINT64_MAX;  // none until a caller sets one, as a table backend's
  RefuseFn refuse_;
};

}  // namespace
}  // namespace tw

extern "C" tw::Backend* tw_backend_create(int ordinal, char* error, size_t error_size) {
  if (ordinal != 0) {
    return tw::module_failure(
        "hostile_memory has one device (hostile_memory:0), not device " + std::to_string(ordinal),
        error, error_size);
  }
  return new tw::HostileMemoryBackend(tw::fail_at_from_env());
}

// The address of tensor `id`'s pages (null: none), for the test that shows that touching them
// from outside the backend crashes.
extern "C" const void* tw_hostile_memory_address(tw::Backend* backend, uint64_t id) {
  auto* b = dynamic_cast<tw::HostileMemoryBackend*>(backend);
  return b ? b->address(id) : nullptr;
}
