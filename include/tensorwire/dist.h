// Collectives over tensors that live on several devices: of several servers, of one server, or
// of this process (docs/remote.md, "Running several servers").
//
//   std::vector<tw::Tensor> grads = {g0, g1};  // g0 on server A's device, g1 on server B's
//   tw::dist::all_reduce(grads, tw::dist::ReduceOp::kMean);  // each now holds the mean, on its
//   device
//
// Each call replaces every tensor of the list with its result, on the same device. Every
// participant's result holds the same bytes. Across servers, the servers run the collective
// with Gloo (TCP), connecting to each other directly after a rendezvous on the first tensor's
// server: the client sends one small task per participant and no tensor bytes. Within one
// server, or among devices of this process, the tensors are reduced on the first tensor's device
// in list order and the result copied to the others (a move that stays inside the server).
// Calls are asynchronous like ops: a failure (a participant that dies, a timeout) is recorded
// in the results and reported when they are read or their devices synced.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/device.h"
#include "tensorwire/export.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw::dist {

enum class ReduceOp { kSum, kMean, kMax };

// A fixed list of devices that run collectives together. Across servers, the first collective
// of a group connects its participants (a rendezvous, then Gloo's connections); later ones
// reuse the connections, so keep the group for a training loop. After a failed collective,
// make a new group.
class Group {
 public:
  // `timeout`: how long a participant waits for the others before its collective fails.
  explicit Group(std::vector<Device> devices,
                 std::chrono::milliseconds timeout = std::chrono::seconds(30));
  const std::vector<Device>& devices() const;
  size_t size() const;
  struct State;

 private:
  std::shared_ptr<State> state_;
  friend struct Access;
};

// Each tensor becomes the elementwise reduction (sum, mean, max) of all of them. Same shape and
// dtype everywhere; f32, f64, i32, i64 (a mean: f32, f64).
void all_reduce(std::vector<Tensor>& tensors, ReduceOp op, const Group& group);
void all_reduce(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::kSum);
// Each tensor becomes a copy of tensors[root].
void broadcast(std::vector<Tensor>& tensors, size_t root, const Group& group);
void broadcast(std::vector<Tensor>& tensors, size_t root = 0);
// Each tensor becomes the concatenation of all of them along dimension 0, in list order.
void all_gather(std::vector<Tensor>& tensors, const Group& group);
void all_gather(std::vector<Tensor>& tensors);
// The reduction of all of them, split along dimension 0 into as many equal parts as there are
// tensors: tensor i becomes part i.
void reduce_scatter(std::vector<Tensor>& tensors, ReduceOp op, const Group& group);
void reduce_scatter(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::kSum);

}  // namespace tw::dist
TW_API_END
