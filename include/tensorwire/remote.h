// Remote devices: how their connections are secured, enumeration, server statistics and wire
// counters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/dtype.h"
#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

struct RemoteDeviceInfo {
  int index = 0;
  std::string name;           // "cpu:0", "torch:1", "vulkan:0"
  std::string backend;        // "cpu", "torch", "vulkan", "cuda"
  uint64_t memory_bytes = 0;  // what one session on it may hold (--session-memory)
  // What the device is, from a server of protocol 16 or later (empty or 0 from an older one):
  std::string model;             // the hardware: "AMD EPYC 7B13 ... (2 threads)", a GPU's name
  uint64_t memory_total = 0;     // bytes of the memory its tensors live in
  uint64_t memory_free = 0;      // of which free when asked (in host memory: within --max-memory)
  bool host_memory = true;       // whether its tensors live in the server's host memory
  std::vector<DType> dtypes;     // the dtypes it runs
  std::vector<std::string> ops;  // the ops it runs, by IR name ("MatMul", "Conv2d", ...)
};

// How a remote device authenticates itself and verifies a tls:// server (docs/remote.md, TLS). A
// field left empty takes its environment variable's value; Device::remote(url, index) takes them
// all from there.
struct RemoteOptions {
  // A PEM file of the CA(s) the server's certificate must chain to; the certificate must also
  // name the host of the URL (TW_TLS_CA).
  std::string tls_ca_file;
  // The SHA-256 fingerprint of the one certificate to accept, as tensorwire-server prints it
  // (hex, colons optional; TW_TLS_FINGERPRINT). With a CA file too, both must hold; with
  // neither, the system's trusted CAs and the host name decide. A mismatch refuses the
  // connection with a message naming both fingerprints.
  std::string tls_fingerprint;
  // The credential to present in the handshake, for a server started with one (TW_CREDENTIAL).
  // Per device, so one process can talk to servers with different credentials.
  std::string credential;
};

// Device `index` of the server at `url`, as Device::remote, verified as `options` says.
Device remote_device(const std::string& url, int index, const RemoteOptions& options);

// Every device the server at `url` hosts. Throws tw::Error if it cannot be reached.
std::vector<RemoteDeviceInfo> remote_devices(const std::string& url);
std::vector<RemoteDeviceInfo> remote_devices(const std::string& url, const RemoteOptions& options);

struct RemoteStats {
  uint32_t sessions = 0;
  uint64_t sessions_opened = 0;
  uint64_t bytes_held = 0;          // all sessions
  uint64_t session_bytes_held = 0;  // this device's session
  uint64_t ops_executed = 0;
  uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0;
  std::vector<std::pair<uint64_t, uint64_t>> per_session_bytes;  // (session id, bytes)
  // Sessions parked for a resume (a client whose connection dropped, or which crashed): they
  // hold their memory until resumed or until their grace (--resume-grace) ends. From servers
  // that speak protocol 12; empty from older ones.
  struct Parked {
    uint64_t session_id = 0;
    uint64_t bytes = 0;
    double seconds_left = 0;
  };
  std::vector<Parked> parked_sessions;
  // The server's --max-memory and what all its sessions hold of it. From servers that speak
  // protocol 14; zeros from older ones.
  uint64_t max_memory_bytes = 0, memory_used_bytes = 0;
};
// Asks the server hosting a remote device for its statistics (a round trip).
RemoteStats remote_stats(const Device& device);

// What this process sent and received for a remote device.
struct WireCounters {
  uint64_t frames_out = 0, bytes_out = 0, frames_in = 0, bytes_in = 0;
  uint64_t ops = 0, round_trips = 0;
  // Waits for a reply in which the caller read the stream itself, and those that polled it for
  // TW_SPIN_US first (a caller whose replies keep outlasting the spin stops spinning).
  uint64_t reading_waits = 0, spun_waits = 0;
};
WireCounters wire_counters(const Device& device);

// Protocol details of the server behind a remote device, from its handshake.
struct RemoteHandshake {
  int protocol_version = 0;
  uint64_t session_id = 0;
  std::string server_id;
  int device_count = 0;
  RemoteDeviceInfo device;
  uint64_t max_frame_bytes = 0, session_memory_bytes = 0;
  uint32_t max_sessions = 0, session_queue_depth = 0;
};
RemoteHandshake remote_handshake(const Device& device);

}  // namespace tw
TW_API_END
