// Where a program's remote time goes, per remote device: ops sent, frames and bytes each way,
// round trips, and the time the program's threads spent waiting for replies. With TW_PROFILE=1 in
// the environment the report is printed to stderr when the program exits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw::profile {

struct DeviceProfile {
  std::string device;     // "remote(tcp://127.0.0.1:7070, 0)"
  uint32_t sessions = 0;  // sessions opened on it (open or closed)
  uint64_t ops = 0, round_trips = 0;
  uint64_t frames_out = 0, bytes_out = 0, frames_in = 0, bytes_in = 0;
  double wait_seconds = 0;  // threads blocked on a read, sync or stats reply (summed over threads)
  // Sessions resumed after a dropped connection (TW_RESUME), and how long each resume took.
  uint64_t resumes = 0;
  std::vector<double> resume_seconds;
  // Training steps marked on this device (a tw::graph::Step called with its tensors, or
  // step(device)); the report's per-step figures divide by these.
  uint64_t steps = 0;
};

// Every remote device this process has connected to, in the order of first connection.
std::vector<DeviceProfile> devices();
// Marks the end of one training step (each call of a tw::graph::Step marks one itself, on the
// device of its tensors), so that the report also gives round trips, time waited and bytes sent
// per step. A step marked on a device counts for that device's figures only; one marked on none
// counts for every device that has no step of its own.
void step();
void step(const std::string& device);  // the name Device::str() gives
// Steps marked so far, on any device or none.
uint64_t steps();
// The same as a table, with the time since the first connection, and a hint when waiting
// dominates ("" when no remote device was used).
std::string report();

}  // namespace tw::profile
TW_API_END
