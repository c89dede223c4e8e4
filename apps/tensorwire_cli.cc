// tensorwire: command-line client (`tensorwire --help` prints the usage below).
//   tensorwire info URL [--tls-fingerprint FP] [--tls-ca FILE]
//                                      devices, limits, sessions (live and parked), memory
//   tensorwire ping URL [COUNT] [--tls-fingerprint FP] [--tls-ca FILE]
//                                      round-trip times (min/median/p99; COUNT 1000)
//   tensorwire trace show FILE         a trace file's inputs, ops (one a line) and outputs
//   tensorwire trace run FILE [--device URL|cpu|torch] [--inputs F.safetensors] [--seed N]
//                                      replays it (inputs from the file, named input0, input1,
//                                      ..., else random floats and zero integers)
//   tensorwire onnx show MODEL.onnx [--shape NAME=D0,D1,...]
//                                      the imported model: names, specs and its IR ops
//   tensorwire onnx run MODEL.onnx [--device URL|cpu|torch] [--inputs F.safetensors]
//                      [--shape NAME=D0,D1,...] [--input-value NAME=V0,V1,...] [--seed N]
//                      [--repeat N] [--full]
//                                      runs it (inputs given by --input-value, which nodes may
//                                      use as constants as LoadOptions::input_values, else from
//                                      the file by their ONNX names, else random floats and zero
//                                      integers); prints each output's
//                                      summary (shape, min, max, mean, first values), --full
//                                      every value
//   tensorwire env [--markdown]          the environment variables it reads (core/env.h)
//   tensorwire --help | --version
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/env.h"
#include "tensorwire/graph.h"
#include "tensorwire/onnx.h"
#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"
#include "tensorwire/version.h"

namespace {

const char kUsage[] =
    "usage: tensorwire COMMAND ...\n"
    "  info URL [--tls-fingerprint FP] [--tls-ca FILE]\n"
    "      a server's devices, limits, sessions (live and parked) and memory\n"
    "  ping URL [COUNT] [--tls-fingerprint FP] [--tls-ca FILE]\n"
    "      COUNT round trips (default 1000): min, median and p99\n"
    "  trace show FILE\n"
    "  trace run FILE [--device URL|cpu|torch] [--inputs F.safetensors] [--seed N]\n"
    "  onnx show MODEL.onnx [--shape NAME=D0,D1,...]\n"
    "  onnx run MODEL.onnx [--device URL|cpu|torch] [--inputs F.safetensors]\n"
    "           [--shape NAME=D0,D1,...] [--input-value NAME=V0,V1,...] [--seed N]\n"
    "           [--repeat N] [--full]\n"
    "  env [--markdown]\n"
    "      the environment variables tensorwire reads: each one's value here and what it does\n"
    "      (--markdown: the table docs/remote.md carries)\n"
    "  --help, --version\n"
    "URL: tcp://HOST:PORT, tls://HOST:PORT or unix:///PATH. The environment: TW_CREDENTIAL (the\n"
    "server's --credential), TW_TLS_FINGERPRINT / TW_TLS_CA (how a tls:// server is trusted),\n"
    "TW_HANDSHAKE_TIMEOUT_MS (how long to wait for a server's first answer); docs/remote.md.\n";

// A usage error: printed with the usage line of the command, exit status 2.
struct UsageError {
  std::string message;
};

// A command's flags: each one named in `with_value` takes the next argument, each one in
// `switches` takes none; anything else starting with "--" is an unknown flag, and the other
// arguments are positional.
struct Flags {
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> switches;
  std::vector<std::string> positional;
  std::string get(const std::string& f, const std::string& fallback) const {
    auto it = values.find(f);
    return it == values.end() ? fallback : it->second.back();
  }
};

Flags parse_flags(const std::string& where, const std::vector<std::string>& args,
                  const std::vector<std::string>& with_value,
                  const std::vector<std::string>& switches = {}) {
  auto listed = [](const std::vector<std::string>& v, const std::string& f) {
    return std::find(v.begin(), v.end(), f) != v.end();
  };
  std::string known;
  for (const auto& f : with_value) known += (known.empty() ? "" : ", ") + f;
  for (const auto& f : switches) known += (known.empty() ? "" : ", ") + f;
  Flags out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      out.positional.push_back(a);
    } else if (listed(switches, a)) {
      out.switches.insert(a);
    } else if (!listed(with_value, a)) {
      throw UsageError{where + ": unknown flag " + a +
                       (known.empty() ? " (it takes none)" : " (flags: " + known + ")")};
    } else if (i + 1 >= args.size()) {
      throw UsageError{where + ": " + a + " needs a value"};
    } else {
      out.values[a].push_back(args[++i]);
    }
  }
  return out;
}

// A whole positive number, or a usage error naming what was given.
int positive_int(const std::string& where, const std::string& what, const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1 || n > 100'000'000) {
    throw UsageError{where + ": " + what + " must be a whole number from 1, not '" + v + "'"};
  }
  return static_cast<int>(n);
}

// How a tls:// server is trusted: the flags, else the environment (RemoteOptions).
tw::RemoteOptions remote_options(const Flags& flags) {
  tw::RemoteOptions o;
  o.tls_fingerprint = flags.get("--tls-fingerprint", "");
  o.tls_ca_file = flags.get("--tls-ca", "");
  return o;
}

std::string human(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

int info(const std::string& url, const tw::RemoteOptions& options) {
  tw::Device dev = tw::remote_device(url, 0, options);
  tw::RemoteHandshake h = tw::remote_handshake(dev);
  tw::RemoteStats s = tw::remote_stats(dev);
  std::printf("server %s at %s (protocol %d)\n", h.server_id.c_str(), url.c_str(),
              h.protocol_version);
  std::printf("devices (%d):\n", h.device_count);
  for (const tw::RemoteDeviceInfo& d : tw::remote_devices(url, options)) {
    std::printf("  %d  %-8s backend=%s memory/session=%s\n", d.index, d.name.c_str(),
                d.backend.c_str(), human(d.memory_bytes).c_str());
    if (!d.model.empty()) {
      std::string dtypes;
      for (tw::DType t : d.dtypes)
        dtypes += (dtypes.empty() ? "" : ",") + std::string(tw::dtype_name(t));
      std::printf("     %s; %s memory %s, %s free; dtypes %s; %zu ops\n", d.model.c_str(),
                  d.host_memory ? "host" : "device", human(d.memory_total).c_str(),
                  human(d.memory_free).c_str(), dtypes.c_str(), d.ops.size());
    }
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
  uint64_t parked_bytes = 0;
  for (const auto& p : s.parked_sessions) parked_bytes += p.bytes;
  std::printf("parked: %zu session(s) waiting for their client to resume, holding %s\n",
              s.parked_sessions.size(), human(parked_bytes).c_str());
  for (const auto& p : s.parked_sessions) {
    std::printf("  session %llu: %s, freed in %.0f s unless resumed\n",
                static_cast<unsigned long long>(p.session_id), human(p.bytes).c_str(),
                p.seconds_left);
  }
  std::printf("traffic: %llu ops executed, %llu frames in (%s), %llu frames out (%s)\n",
              static_cast<unsigned long long>(s.ops_executed),
              static_cast<unsigned long long>(s.frames_in), human(s.bytes_in).c_str(),
              static_cast<unsigned long long>(s.frames_out), human(s.bytes_out).c_str());
  return 0;
}

int ping(const std::string& url, int count, const tw::RemoteOptions& options) {
  tw::Device dev = tw::remote_device(url, 0, options);
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

// The inputs a run takes: `values` (--input-value) by name, else `given` by name when a file was
// given, else random floats and zero integers (seeded).
std::vector<tw::Tensor> make_inputs(const std::vector<tw::graph::TensorSpec>& specs,
                                    const std::vector<std::string>& names,
                                    const std::map<std::string, tw::Tensor>& given,
                                    const std::string& file, const tw::Device& dev,
                                    const std::map<std::string, tw::Tensor>& values = {}) {
  std::vector<tw::Tensor> inputs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const tw::graph::TensorSpec& s = specs[i];
    if (auto v = values.find(names[i]); v != values.end()) {
      inputs.push_back(v->second.to(dev));
    } else if (!file.empty()) {
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

// --input-value NAME=V0,V1,... (repeatable): a value for graph input NAME, in its declared dtype
// and shape (a symbolic dim, one at most, takes what the value count leaves; --shape gives the
// shape otherwise), into `values`.
void parse_input_value(const std::string& path, const std::string& v,
                       const std::map<std::string, tw::Shape>& shapes,
                       std::map<std::string, tw::Tensor>& values) {
  const size_t eq = v.find('=');
  if (eq == std::string::npos) throw tw::Error("--input-value wants NAME=V0,V1,..., not " + v);
  const std::string name = v.substr(0, eq);
  std::optional<tw::graph::TensorSpec> spec;
  std::string names;
  for (const auto& [n, s] : tw::onnx::input_specs(path, shapes)) {
    names += (names.empty() ? "" : ", ") + n;
    if (n == name) spec = s;
  }
  if (!spec)
    throw tw::Error("--input-value " + name + ": the model has no input " + name +
                    " (its inputs: " + names + ")");
  std::vector<std::string> items;
  for (size_t at = eq + 1; at <= v.size();) {
    size_t comma = v.find(',', at);
    if (comma == std::string::npos) comma = v.size();
    items.push_back(v.substr(at, comma - at));
    at = comma + 1;
  }
  if (v.size() == eq + 1) items.clear();
  std::vector<double> f;
  std::vector<int64_t> i;
  for (const std::string& item : items) {
    char* end = nullptr;
    const bool is_bool = item == "true" || item == "false";
    if (tw::is_float(spec->dtype)) {
      f.push_back(is_bool ? (item == "true" ? 1.0 : 0.0) : std::strtod(item.c_str(), &end));
    } else {
      i.push_back(is_bool ? item == "true" : std::strtoll(item.c_str(), &end, 10));
    }
    if (!is_bool && (item.empty() || *end != '\0'))
      throw tw::Error("--input-value " + name + ": '" + item + "' is not a number for " +
                      spec->str());
  }
  const int64_t count = static_cast<int64_t>(items.size());
  tw::Shape shape = spec->shape;
  int64_t known = 1, unknown = 0;
  for (int64_t d : shape) {
    if (d < 0) {
      ++unknown;
    } else {
      known *= d;
    }
  }
  if (unknown == 1 && known > 0 && count % known == 0) {
    for (int64_t& d : shape) d = d < 0 ? count / known : d;
  } else if (unknown > 0 || known != count) {
    throw tw::Error("--input-value " + name + ": input " + name + " is " + spec->str() + ", " +
                    std::to_string(count) + " values given" +
                    (unknown > 1 ? " (give its shape with --shape)" : ""));
  }
  const tw::Tensor t =
      tw::is_float(spec->dtype)
          ? tw::from_bytes({reinterpret_cast<const uint8_t*>(f.data()), f.size() * 8}, shape,
                           tw::kF64)
          : tw::from_bytes({reinterpret_cast<const uint8_t*>(i.data()), i.size() * 8}, shape,
                           tw::kI64);
  values[name] = t.to(spec->dtype);
}

// A tensor in a line: its values when there are few, else min, max, mean and the first values
// (`--full` prints them all).
std::string summary(const tw::Tensor& t) {
  constexpr int64_t kWhole = 8, kFirst = 4;
  if (t.numel() <= kWhole) return t.to_string();
  const std::vector<float> v = t.to(tw::kF32).to_vector<float>();
  double lo = v[0], hi = v[0], sum = 0;
  for (float x : v) {
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
    sum += x;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld values: min %.6g, max %.6g, mean %.6g, first [",
                static_cast<long long>(v.size()), lo, hi, sum / static_cast<double>(v.size()));
  std::string out = buf;
  for (int64_t i = 0; i < kFirst; ++i) {
    std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", v[static_cast<size_t>(i)]);
    out += buf;
  }
  return out + ", ...] (--full prints every value)";
}

int onnx_show(const std::string& path, const std::vector<std::string>& args) {
  tw::onnx::LoadOptions options;
  const Flags flags = parse_flags("onnx show", args, {"--shape"});
  if (!flags.positional.empty()) throw UsageError{"onnx show: unexpected " + flags.positional[0]};
  if (flags.values.count("--shape")) {
    for (const auto& v : flags.values.at("--shape")) parse_shape(v, options.input_shapes);
  }
  std::fputs(tw::onnx::load(path, options).str().c_str(), stdout);
  return 0;
}

int onnx_run(const std::string& path, const std::vector<std::string>& args) {
  const Flags flags = parse_flags(
      "onnx run", args, {"--device", "--inputs", "--shape", "--input-value", "--seed", "--repeat"},
      {"--full"});
  if (!flags.positional.empty()) throw UsageError{"onnx run: unexpected " + flags.positional[0]};
  const std::string device = flags.get("--device", "cpu"), inputs_path = flags.get("--inputs", "");
  const uint64_t seed = std::strtoull(flags.get("--seed", "0").c_str(), nullptr, 10);
  const int repeat = positive_int("onnx run", "--repeat", flags.get("--repeat", "1"));
  tw::onnx::LoadOptions options;
  if (flags.values.count("--shape")) {
    for (const auto& v : flags.values.at("--shape")) parse_shape(v, options.input_shapes);
  }
  if (flags.values.count("--input-value")) {
    for (const auto& v : flags.values.at("--input-value"))
      parse_input_value(path, v, options.input_shapes, options.input_values);
  }
  const tw::Device dev = device_named(device);
  std::map<std::string, tw::Tensor> given;
  if (!inputs_path.empty()) given = tw::load_safetensors(inputs_path, dev);
  const tw::onnx::Model model = tw::onnx::load(path, options);
  tw::manual_seed(seed);
  const std::vector<tw::Tensor> inputs = make_inputs(model.trace.inputs(), model.input_names, given,
                                                     inputs_path, dev, options.input_values);
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
  const bool full = flags.switches.count("--full") > 0;
  for (size_t i = 0; i < out.size(); ++i) {
    std::printf("output %zu '%s': %s %s\n", i, model.output_names[i].c_str(),
                model.trace.outputs()[i].str().c_str(),
                (full ? out[i].to_string() : summary(out[i])).c_str());
  }
  return 0;
}

int trace_run(const std::string& path, const std::vector<std::string>& args) {
  const Flags flags = parse_flags("trace run", args, {"--device", "--inputs", "--seed"});
  if (!flags.positional.empty()) throw UsageError{"trace run: unexpected " + flags.positional[0]};
  const std::string device = flags.get("--device", "cpu"), inputs_path = flags.get("--inputs", "");
  const uint64_t seed = std::strtoull(flags.get("--seed", "0").c_str(), nullptr, 10);
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

namespace {

// `tensorwire env`: every variable core/env.h declares, with its value in this environment; with
// --markdown, the table docs/remote.md carries ("Environment variables"), which a test compares
// with the declarations.
int print_env(bool markdown) {
  if (markdown) {
    std::printf("| Variable | Takes | What it does |\n|---|---|---|\n");
    for (const tw::EnvVar& v : tw::env_vars())
      std::printf("| `%s` | %s | %s |\n", v.name, tw::env_kind_name(v.kind), v.what);
    return 0;
  }
  for (const tw::EnvVar& v : tw::env_vars()) {
    const char* value = std::getenv(v.name);
    std::printf("%-24s %s\n  %s (%s)\n", v.name,
                value ? ("= '" + std::string(value) + "'").c_str() : "(not set)", v.what,
                tw::env_kind_name(v.kind));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string& cmd = args[0];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("tensorwire %s (protocol %d)\n", tw::version(), tw::protocol_version());
    return 0;
  }
  try {
    const std::vector<std::string> rest(args.begin() + 1, args.end());
    if (cmd == "info" || cmd == "ping") {
      const Flags flags = parse_flags(cmd, rest, {"--tls-fingerprint", "--tls-ca"});
      const size_t most = cmd == "ping" ? 2 : 1;
      if (flags.positional.empty() || flags.positional.size() > most) {
        throw UsageError{
            cmd + (cmd == "ping" ? " URL [COUNT]" : " URL") +
            ": give the server's URL (tcp://HOST:PORT, tls://HOST:PORT, unix:///PATH)"};
      }
      const std::string& url = flags.positional[0];
      if (cmd == "info") return info(url, remote_options(flags));
      const int count =
          flags.positional.size() > 1 ? positive_int("ping", "COUNT", flags.positional[1]) : 1000;
      return ping(url, count, remote_options(flags));
    }
    if (cmd == "env") {
      const Flags flags = parse_flags(cmd, rest, {}, {"--markdown"});
      if (!flags.positional.empty()) throw UsageError{"env: env [--markdown] (no arguments)"};
      return print_env(flags.switches.count("--markdown") > 0);
    }
    if (cmd == "trace" || cmd == "onnx") {
      const std::string what = rest.empty() ? "" : rest[0];
      if (rest.size() < 2 || (what != "show" && what != "run")) {
        throw UsageError{cmd + ": " + cmd + " show FILE | " + cmd + " run FILE [flags]"};
      }
      const std::vector<std::string> flags(rest.begin() + 2, rest.end());
      if (cmd == "trace") {
        if (what == "show") {
          if (!flags.empty()) parse_flags("trace show", flags, {});
          return trace_show(rest[1]);
        }
        return trace_run(rest[1], flags);
      }
      return what == "show" ? onnx_show(rest[1], flags) : onnx_run(rest[1], flags);
    }
    throw UsageError{"unknown command '" + cmd + "' (info, ping, trace, onnx, env; --help)"};
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tensorwire: %s\n(tensorwire --help lists the commands and flags)\n",
                 e.message.c_str());
    return 2;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tensorwire: %s\n", e.what());
    return 1;
  }
}
