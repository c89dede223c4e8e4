"""tw.dist: collectives over tensors on several devices (tensorwire/dist.h). Across servers the
servers run them with Gloo, connecting to each other directly (the client sends no tensor
bytes); on devices of one server, or of this process, the tensors are reduced on the first
device and the result copied. Each call returns the list of results, one on each tensor's device,
all holding the same bytes. Asynchronous like ops: a failure shows when a result is read."""
from . import _tensorwire as _C

ReduceOp = _C.dist.ReduceOp
Group = _C.dist.Group
all_reduce = _C.dist.all_reduce
broadcast = _C.dist.broadcast
all_gather = _C.dist.all_gather
reduce_scatter = _C.dist.reduce_scatter

__all__ = ["ReduceOp", "Group", "all_reduce", "broadcast", "all_gather", "reduce_scatter"]
