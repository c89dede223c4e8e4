// A client process for fault tests: connects to the server at argv[1], makes a tensor of
// argv[2] MiB on device 0, prints "ready" once the server holds it, then waits to be killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tensorwire/remote.h"
#include "tensorwire/tensorwire.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  tw::Device dev = tw::Device::remote(argv[1], 0);
  int64_t mib = std::atoll(argv[2]);
  tw::Tensor t = tw::ones({mib, 256 * 1024}, tw::kF32, dev);
  dev.sync();
  std::printf("ready %llu\n",
              static_cast<unsigned long long>(tw::remote_stats(dev).session_bytes_held));
  std::fflush(stdout);
  for (;;) pause();
}
