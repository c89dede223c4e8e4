// The remote device's executor: a Backend over a Connection. Ops validated by the API are
// queued and shipped in batches (submit); reads become requests answered in any order
// (read_async / await); tensors move between two remote backends without passing through this
// process (export_tensor / import_tensor); a collective is this session's part of one run on
// the servers. A server never hosts it (hostable()).
#pragma once
#include <string>

#include "backend/backend.h"
#include "client/connection.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::client {

class RemoteBackend final : public Backend {
 public:
  RemoteBackend(net::Url url, uint32_t index, Options options)
      : conn_(std::move(url), index, std::move(options)), index_(index) {}

  std::string name() const override {
    return "remote(" + conn_.url().str() + ", " + std::to_string(index_) + ")";
  }
  DeviceKind kind() const override { return DeviceKind::kRemote; }
  // An op whose list entry says a later protocol than the server's is not sent (a server that
  // cannot be reached answers false, and the op's caller then fails on its fallback with the
  // connection's error).
  bool supports(ir::OpCode code) override;
  Status hostable() const override;
  // The Connection serialises its own state: reads wait without holding up other threads' ops.
  bool thread_safe() const override { return true; }

  Status execute(const ir::Op& op) override { return conn_.submit_op(op); }
  Status submit(const ir::Op& op) override { return conn_.submit_op(op); }
  Status submit_inferred(const ir::Op& op, std::vector<TensorMeta>) override {
    return conn_.submit_op(op);
  }
  Result<TensorData> read(ir::TensorId id) override { return conn_.read_wait(id); }
  Result<TensorData> read_expecting(ir::TensorId id, uint64_t nbytes) override {
    return conn_.read_wait(id, nbytes);
  }
  std::future<Result<TensorData>> read_async(ir::TensorId id, uint64_t nbytes) override {
    return conn_.read(id, nbytes);
  }
  // Connection::read_into: the values received straight into `into` (internal: checkpoints).
  std::future<Result<TensorData>> read_into(ir::TensorId id, Buffer into) {
    return conn_.read_into(id, std::move(into));
  }
  Result<TensorData> await(std::future<Result<TensorData>>& f) override {
    return conn_.wait_read(f);
  }
  Buffer host_copy(const void* data, size_t n) override { return conn_.host_copy(data, n); }
  Status drop(ir::TensorId id) override {
    conn_.drop(id);  // batched; the server ignores an id it never made
    return Status::OK();
  }
  Status connect() override { return conn_.ensure_connected(); }
  void flush() override { conn_.flush(); }
  Status sync() override { return conn_.sync(); }

  // Graphs are registered on the server's session once (protocol 2) and run there by id.
  Result<ir::GraphId> register_graph(ir::Graph graph) override;
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override;

  // Between servers speaking protocol 3 a tensor moves by capability: the source session
  // exports it, and the destination session takes it from a session of its own server (same
  // server id) or pulls it from the source server (Backend::copy_to). With an older server,
  // copy_to reads and uploads instead.
  bool exports() override { return speaks(3); }
  // To another server that this one is not, with the tensor's meta known (CopyMetaScope) and
  // this server speaking protocol 17: the move is issued without waiting (an ExportAs task under
  // a ticket drawn here, and the import of the ticket capability at the destination, whose pull
  // waits at this server until the export has run). Otherwise Backend::copy_to (export, wait for
  // the capability, import).
  Status copy_to(ir::TensorId src, Backend& dst, ir::TensorId dst_id) override;
  bool imports() override { return speaks(3); }
  Result<TensorHandoff> export_tensor(ir::TensorId id) override;
  Status import_tensor(const TensorHandoff& h, ir::TensorId dst_id) override;

  Result<CollectiveDomain> collective_domain() override;
  Status collective(const ir::CollectiveSpec& spec) override {
    return conn_.submit_collective(spec);
  }

  // What a server-side session has and a device shipping ops to one has not: a server never
  // hosts this backend (hostable()), so these are never asked of it by a session; the tensors'
  // metas live in the API's tensors, and their bytes and limits on the server.
  void set_memory_limit(uint64_t, RefuseFn) override {}
  void fail(const ir::Op&, const Status&) override {}
  Result<TensorMeta> meta(ir::TensorId id) const override;
  size_t bytes_held() const override { return 0; }

  Connection& connection() { return conn_; }

 private:
  // Whether the server speaks at least `version` (connecting first; false when it cannot).
  bool speaks(uint16_t version);

  Connection conn_;
  uint32_t index_;
};

}  // namespace tw::client
TW_INTERNAL_END
