// The remote device's sink: ops validated by the API are queued on a Connection and shipped in
// batches; reads become requests answered in any order.
#pragma once
#include "api/sink.h"
#include "client/connection.h"

namespace tw::client {

class RemoteSink final : public detail::Sink {
 public:
  RemoteSink(net::Url url, uint32_t index, Options options)
      : conn_(url, index, std::move(options)), index_(index) {}
  Device::Kind kind() const override { return Device::Kind::kRemote; }
  std::string str() const override {
    return "remote(" + conn_.url().str() + ", " + std::to_string(index_) + ")";
  }
  Status submit(ir::Op op) override { return conn_.submit_op(op); }
  // Ops of a later protocol than the server's are not sent (a server that cannot be reached
  // answers false, and the op's caller then fails on its fallback with the connection's error).
  bool supports(ir::OpCode code) override {
    uint16_t since = 0;
    if (code == ir::OpCode::kAdamStep) since = protocol::kAdamStepVersion;
    if (code == ir::OpCode::kLinear) since = protocol::kLinearVersion;
    return since == 0 || (conn_.ensure_connected().ok() && conn_.welcome().version >= since);
  }
  std::future<Result<TensorData>> read_async(ir::TensorId id) override { return conn_.read(id); }
  Result<TensorData> read(ir::TensorId id) override { return conn_.read_wait(id); }
  Result<TensorData> await(std::future<Result<TensorData>>& f) override {
    return conn_.wait_read(f);
  }
  Result<TensorData> read_expecting(ir::TensorId id, uint64_t nbytes) override {
    return conn_.read_wait(id, nbytes);
  }
  std::future<Result<TensorData>> read_async_expecting(ir::TensorId id, uint64_t nbytes) override {
    return conn_.read(id, nbytes);
  }
  Buffer host_copy(const void* data, size_t n) override { return conn_.host_copy(data, n); }
  void drop(ir::TensorId id) override { conn_.drop(id); }
  Status sync() override { return conn_.sync(); }
  Status connect() override { return conn_.ensure_connected(); }
  void flush() override { conn_.flush(); }
  // To a remote device (this one included) of a server speaking protocol 3, the tensor moves
  // without its bytes passing through this client: the source session exports it (a
  // capability), and the destination session takes it from a session of its own server (same
  // server id) or pulls it from the source server. Otherwise Sink's default (read, then upload
  // to the destination).
  Status copy_to(ir::TensorId src, detail::Sink& dst, ir::TensorId dst_id) override;
  // Graphs are registered on the server's session once and run there by id (remote.cc).
  Result<ir::GraphId> register_graph(ir::Graph graph) override;
  Status run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) override;
  Connection& connection() { return conn_; }

 private:
  Connection conn_;
  uint32_t index_;
};

}  // namespace tw::client
