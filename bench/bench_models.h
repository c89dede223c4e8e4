// Models the training benchmarks share (train_bench.cc, graph_bench.cc), so that both time the
// same network.
#pragma once
#include <memory>

#include "tensorwire/nn.h"

namespace tw::bench {

// The MLP 64-512-512-10 of the training rows (the digits CNN is tw::digits::make_model).
inline std::shared_ptr<nn::Module> mlp_64_512_512_10(const nn::Placement& at) {
  return std::make_shared<nn::Sequential>(nn::Linear(64, 512, true, at), nn::ReLU(),
                                          nn::Linear(512, 512, true, at), nn::ReLU(),
                                          nn::Linear(512, 10, true, at));
}

}  // namespace tw::bench
