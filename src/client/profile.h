// The registry behind tw::profile (include/tensorwire/profile.h): every Connection enrols at
// construction and hands its final counters over at destruction, so the report covers devices
// whose connections have closed. Touched once per connection, never per op.
#pragma once
#include "client/connection.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::client::profile {

void enrol(const Connection* c);
void leave(const Connection* c, const Counters& final_counters);

}  // namespace tw::client::profile
TW_INTERNAL_END
