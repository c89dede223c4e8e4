#include "client/remote_backend.h"

#include <openssl/rand.h>

#include "backend/copy_meta.h"

namespace tw::client {

bool RemoteBackend::speaks(uint16_t version) {
  return conn_.ensure_connected().ok() && conn_.welcome().version >= version;
}

bool RemoteBackend::supports(ir::OpCode code) {
  const uint16_t since = ir::op_since_protocol(code);
  return since != 0 && (since <= protocol::kMinProtocolVersion || speaks(since));
}

Status RemoteBackend::hostable() const {
  return invalid_argument("cannot serve " + name() +
                          ": a remote device only forwards ops to another server; a server hosts "
                          "devices that execute ops itself. Host tw::Device::cpu() here, or let "
                          "clients connect to that server directly");
}

Result<TensorMeta> RemoteBackend::meta(ir::TensorId id) const {
  return unimplemented(name() + ": the meta of tensor %" + std::to_string(id) +
                       " is kept by the program's tensor, not asked of the server");
}

Result<ir::GraphId> RemoteBackend::register_graph(ir::Graph graph) {
  TW_RETURN_NOT_OK(conn_.ensure_connected());
  if (conn_.welcome().version < protocol::kGraphsSince) {
    return unimplemented("register_graph: the server at " + conn_.url().str() +
                         " speaks protocol " + std::to_string(conn_.welcome().version) +
                         ", which has no graph tasks (they need 2); submit the ops one by one");
  }
  return conn_.register_graph(graph);
}

Status RemoteBackend::run_graph(ir::GraphId graph, std::span<const ir::TensorId> inputs,
                                std::span<const ir::TensorId> outputs) {
  return conn_.run_graph(graph, {inputs.begin(), inputs.end()}, {outputs.begin(), outputs.end()});
}

Result<Backend::TensorHandoff> RemoteBackend::export_tensor(ir::TensorId id) {
  TW_ASSIGN_OR_RETURN(protocol::Exported e, conn_.export_tensor(id));
  TensorHandoff h;
  h.domain = conn_.welcome().server_id;
  // The destination dials the source at the address this client used, pinning the certificate
  // fingerprint this client pins (when it pins one), with its own credential.
  h.url = conn_.url().str();
  h.fingerprint = conn_.options().tls.fingerprint;
  h.session = conn_.welcome().session_id;
  h.id = id;
  h.capability = std::move(e.capability);
  h.meta = std::move(e.meta);
  return h;
}

Status RemoteBackend::copy_to(ir::TensorId src, Backend& dst, ir::TensorId dst_id) {
  const TensorMeta* meta = CopyMetaScope::current();
  auto* to = dynamic_cast<RemoteBackend*>(&dst);
  if (!meta || !to || !speaks(protocol::kExportAheadSince) || !to->imports() ||
      to->conn_.welcome().server_id == conn_.welcome().server_id) {
    // (A same-server move redeems at once, so it needs the capability the export answers with.)
    return Backend::copy_to(src, dst, dst_id);
  }
  std::string ticket(protocol::kTicketBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(ticket.data()),
                 static_cast<int>(ticket.size())) != 1) {
    return internal_error("move: cannot draw a random ticket (OpenSSL RAND_bytes)");
  }
  TW_RETURN_NOT_OK(conn_.export_as(src, ticket));
  protocol::TicketCapability c{conn_.welcome().server_id, conn_.welcome().session_id, src, *meta,
                               std::move(ticket)};
  TensorHandoff h;
  h.domain = c.server_id;
  h.url = conn_.url().str();
  h.fingerprint = conn_.options().tls.fingerprint;
  h.session = c.session_id;
  h.id = src;
  h.meta = *meta;
  h.capability = protocol::encode_ticket_capability(c);
  TW_RETURN_NOT_OK(to->import_tensor(h, dst_id));
  // Sent now, so that the destination dials this server while the tensor is still computed.
  to->flush();
  return Status::OK();
}

Status RemoteBackend::import_tensor(const TensorHandoff& h, ir::TensorId dst_id) {
  TW_RETURN_NOT_OK(conn_.ensure_connected());
  protocol::TensorSource source{h.session, h.id, h.capability, "", ""};
  if (h.domain == conn_.welcome().server_id) {
    return conn_.move_in(protocol::TaskKind::kMoveLocal, dst_id, h.meta, source);
  }
  source.url = h.url;
  source.fingerprint = h.fingerprint;
  return conn_.move_in(protocol::TaskKind::kImport, dst_id, h.meta, source);
}

Result<Backend::CollectiveDomain> RemoteBackend::collective_domain() {
  TW_RETURN_NOT_OK(conn_.ensure_connected());
  if (conn_.welcome().version < protocol::kMovesSince) return CollectiveDomain{};
  return CollectiveDomain{conn_.welcome().server_id, conn_.url().str(),
                          conn_.options().tls.fingerprint};
}

}  // namespace tw::client
