// tensorwire: command-line client.
//   tensorwire info tcp://host:port    devices, limits, sessions, memory
//   tensorwire ping tcp://host:port    round-trip times (min/median/p99)
//   tensorwire trace show FILE         a trace file's inputs, ops (one a line) and outputs
//   tensorwire trace run FILE [--device URL|cpu|torch] [--inputs F.safetensors] [--seed N]
//                                      replays it (inputs from the file, named input0, input1,
//                                      ..., else random floats and zero integers)
//   tensorwire onnx show MODEL.onnx [--shape NAME=D0,D1,...]
//                                      the imported model: names, specs and its IR ops
//   tensorwire onnx run MODEL.onnx [--device URL|cpu|torch] [--inputs F.safetensors]
//                      [--shape NAME=D0,D1,...] [--seed N] [--repeat N]
//                                      runs it (inputs from the file by their ONNX names, else
//                                      random floats and zero integers)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "tensorwire/graph.h"
#include "tensorwire/onnx.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

namespace {

std::string human(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

int info(const std::string& url) {
  tw::Device dev = tw::Device::remote(url, 0);
  tw::RemoteHandshake h = tw::remote_handshake(dev);
  tw::RemoteStats s = tw::remote_stats(dev);
  std::printf("server %s at %s (protocol %d)\n", h.server_id.c_str(), url.c_str(),
              h.protocol_version);
  std::printf("devices (%d):\n", h.device_count);
  for (const tw::RemoteDeviceInfo& d : tw::remote_devices(url)) {
    std::printf("  %d  %-8s backend=%s memory/session=%s\n", d.index, d.name.c_str(),
                d.backend.c_str(), human(d.memory_bytes).c_str());
  }
  std::printf("limits: max-sessions=%u max-frame=%s session-memory=%s queue-depth=%u\n",
              h.max_sessions, human(h.max_frame_bytes).c_str(),
              human(h.session_memory_bytes).c_str(), h.session_queue_depth);
  std::printf("sessions: %u open (including this one), %llu opened since start\n", s.sessions,
              static_cast<unsigned long long>(s.sessions_opened));
  std::printf("memory held: %s in total\n", human(s.bytes_held).c_str());
  for (auto& [id, bytes] : s.per_session_bytes) {
    std::printf("  session %llu: %s\n", static_cast<unsigned long long>(id), human(bytes).c_str());
  }
  std::printf("traffic: %llu ops executed, %llu frames in (%s), %llu frames out (%s)\n",
              static_cast<unsigned long long>(s.ops_executed),
              static_cast<unsigned long long>(s.frames_in), human(s.bytes_in).c_str(),
              static_cast<unsigned long long>(s.frames_out), human(s.bytes_out).c_str());
  return 0;
}

int ping(const std::string& url, int count) {
  tw::Device dev = tw::Device::remote(url, 0);
  dev.connect();
  std::vector<double> us;
  for (int i = 0; i < count; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    dev.sync();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))];
  };
  std::printf("%d round trips to %s: min %.1f us, median %.1f us, p99 %.1f us\n", count,
              url.c_str(), us.front(), pct(0.5), pct(0.99));
  return 0;
}

tw::Device device_named(const std::string& name) {
  if (name.find("://") != std::string::npos) return tw::Device::remote(name, 0);
  return tw::Device::local(name);  // cpu, torch, vulkan:0
}

int trace_show(const std::string& path) {
  std::fputs(tw::graph::Trace::load(path).str().c_str(), stdout);
  return 0;
}

// The inputs a run takes: `given` by name when a file was given, else random floats and zero
// integers (seeded).
std::vector<tw::Tensor> make_inputs(const std::vector<tw::graph::TensorSpec>& specs,
                                    const std::vector<std::string>& names,
                                    const std::map<std::string, tw::Tensor>& given,
                                    const std::string& file, const tw::Device& dev) {
  std::vector<tw::Tensor> inputs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const tw::graph::TensorSpec& s = specs[i];
    if (!file.empty()) {
      auto it = given.find(names[i]);
      if (it == given.end()) throw tw::Error(file + " has no tensor " + names[i]);
      inputs.push_back(it->second);
    } else if (tw::is_float(s.dtype)) {
      inputs.push_back(tw::randn(s.shape, tw::kF32, dev).to(s.dtype));
    } else {
      inputs.push_back(tw::zeros(s.shape, s.dtype, dev));
    }
  }
  return inputs;
}

// --shape NAME=D0,D1,... (repeatable) into `shapes`.
void parse_shape(const std::string& v, std::map<std::string, tw::Shape>& shapes) {
  const size_t eq = v.find('=');
  if (eq == std::string::npos) throw tw::Error("--shape wants NAME=D0,D1,..., not " + v);
  tw::Shape s;
  for (size_t at = eq + 1; at < v.size();) {
    size_t comma = v.find(',', at);
    if (comma == std::string::npos) comma = v.size();
    s.push_back(std::strtoll(v.substr(at, comma - at).c_str(), nullptr, 10));
    at = comma + 1;
  }
  shapes[v.substr(0, eq)] = s;
}

int onnx_show(const std::string& path, const std::vector<std::string>& flags) {
  tw::onnx::LoadOptions options;
  for (size_t i = 0; i < flags.size(); i += 2) {
    if (flags[i] != "--shape" || i + 1 >= flags.size())
      throw tw::Error("onnx show: unknown flag " + flags[i] + " (--shape NAME=D0,D1,...)");
    parse_shape(flags[i + 1], options.input_shapes);
  }
  std::fputs(tw::onnx::load(path, options).str().c_str(), stdout);
  return 0;
}

int onnx_run(const std::string& path, const std::vector<std::string>& flags) {
  std::string device = "cpu", inputs_path;
  uint64_t seed = 0;
  int repeat = 1;
  tw::onnx::LoadOptions options;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& f = flags[i];
    if (i + 1 >= flags.size()) throw tw::Error("onnx run: " + f + " needs a value");
    const std::string& v = flags[++i];
    if (f == "--device") {
      device = v;
    } else if (f == "--inputs") {
      inputs_path = v;
    } else if (f == "--shape") {
      parse_shape(v, options.input_shapes);
    } else if (f == "--seed") {
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else if (f == "--repeat") {
      repeat = std::max(1, std::atoi(v.c_str()));
    } else {
      throw tw::Error("onnx run: unknown flag " + f +
                      " (--device, --inputs, --shape, --seed, --repeat)");
    }
  }
  const tw::Device dev = device_named(device);
  std::map<std::string, tw::Tensor> given;
  if (!inputs_path.empty()) given = tw::load_safetensors(inputs_path, dev);
  const tw::onnx::Model model = tw::onnx::load(path, options);
  tw::manual_seed(seed);
  const std::vector<tw::Tensor> inputs =
      make_inputs(model.trace.inputs(), model.input_names, given, inputs_path, dev);
  std::vector<tw::Tensor> out;
  dev.sync();  // the inputs are there before the clock starts
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    out = model.run(dev, inputs);
    dev.sync();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ran %zu ONNX nodes (%zu ops) on %s in %.3f ms%s\n", model.num_nodes,
                model.trace.num_ops(), dev.str().c_str(), ms,
                model.trace.runs_as_graph(dev) ? " as one graph" : "");
  }
  for (size_t i = 0; i < out.size(); ++i) {
    std::printf("output %zu '%s': %s %s\n", i, model.output_names[i].c_str(),
                model.trace.outputs()[i].str().c_str(), out[i].to_string().c_str());
  }
  return 0;
}

int trace_run(const std::string& path, const std::vector<std::string>& flags) {
  std::string device = "cpu", inputs_path;
  uint64_t seed = 0;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& f = flags[i];
    if (i + 1 >= flags.size()) throw tw::Error("trace run: " + f + " needs a value");
    const std::string& v = flags[++i];
    if (f == "--device") {
      device = v;
    } else if (f == "--inputs") {
      inputs_path = v;
    } else if (f == "--seed") {
      seed = std::strtoull(v.c_str(), nullptr, 10);
    } else {
      throw tw::Error("trace run: unknown flag " + f + " (--device, --inputs, --seed)");
    }
  }
  const tw::graph::Trace trace = tw::graph::Trace::load(path);
  const tw::Device dev = device_named(device);
  std::map<std::string, tw::Tensor> given;
  if (!inputs_path.empty()) given = tw::load_safetensors(inputs_path, dev);
  tw::manual_seed(seed);
  std::vector<std::string> names;
  for (size_t i = 0; i < trace.inputs().size(); ++i) names.push_back("input" + std::to_string(i));
  const std::vector<tw::Tensor> inputs =
      make_inputs(trace.inputs(), names, given, inputs_path, dev);
  dev.sync();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<tw::Tensor> out = trace.replay(dev, inputs);
  dev.sync();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("replayed %zu ops on %s in %.3f ms\n", trace.num_ops(), dev.str().c_str(), ms);
  for (size_t i = 0; i < out.size(); ++i) {
    std::printf("output %zu: %s %s\n", i, trace.outputs()[i].str().c_str(),
                out[i].to_string().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(
        stderr,
        "usage: tensorwire info URL | tensorwire ping URL [COUNT] | tensorwire trace show FILE"
        " | tensorwire trace run FILE [--device URL|cpu|torch] [--inputs F.safetensors] [--seed "
        "N] | tensorwire onnx show|run MODEL.onnx [flags]\n");
    return 2;
  }
  std::string cmd = argv[1], url = argv[2];
  try {
    if (cmd == "info") return info(url);
    if (cmd == "ping") return ping(url, argc > 3 ? std::max(1, std::atoi(argv[3])) : 1000);
    if (cmd == "trace" && argc >= 4 && url == "show") return trace_show(argv[3]);
    if (cmd == "trace" && argc >= 4 && url == "run") {
      return trace_run(argv[3], std::vector<std::string>(argv + 4, argv + argc));
    }
    if (cmd == "trace") {
      std::fprintf(stderr,
                   "usage: tensorwire trace show FILE | tensorwire trace run FILE [flags]\n");
      return 2;
    }
    if (cmd == "onnx" && argc >= 4 && (url == "show" || url == "run")) {
      const std::vector<std::string> flags(argv + 4, argv + argc);
      return url == "show" ? onnx_show(argv[3], flags) : onnx_run(argv[3], flags);
    }
    if (cmd == "onnx") {
      std::fprintf(stderr,
                   "usage: tensorwire onnx show MODEL.onnx [--shape NAME=D0,D1,...] | tensorwire "
                   "onnx run MODEL.onnx [--device URL|cpu|torch] [--inputs F.safetensors] [--shape "
                   "NAME=D0,...] [--seed N] [--repeat N]\n");
      return 2;
    }
    std::fprintf(stderr, "tensorwire: unknown command '%s' (info, ping, trace, onnx)\n",
                 cmd.c_str());
    return 2;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tensorwire: %s\n", e.what());
    return 1;
  }
}
