// The one header users include.
#pragma once
#include "tensorwire/autograd.h"
#include "tensorwire/checkpoint.h"
#include "tensorwire/device.h"
#include "tensorwire/dist.h"
#include "tensorwire/dtype.h"
#include "tensorwire/error.h"
#include "tensorwire/export.h"
#include "tensorwire/failover.h"
#include "tensorwire/nn.h"
#include "tensorwire/optim.h"
#include "tensorwire/serialize.h"
#include "tensorwire/split.h"
#include "tensorwire/tensor.h"
#include "tensorwire/transformer.h"
#include "tensorwire/version.h"

TW_API_BEGIN
TW_API_END
