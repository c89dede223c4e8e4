"""tw.graph: op traces and graphs (tensorwire/graph.h, docs/trace.md).

    cap = tw.graph.Capture(tw.Device.cpu())
    x = cap.input(x_cpu)                 # the trace's input, bound to x_cpu's values
    y = (x * 2).relu().sum()             # recorded, and run on the inner device
    trace = cap.finish([y])
    trace.save("step.twtrace")
    out, = tw.graph.Trace.load("step.twtrace").replay(remote, [x_remote])

Step caches a training step: the first call runs eagerly, the second records, later calls replay
the recorded trace as one registered graph (a remote device gets one small frame per step):

    step = tw.graph.Step(lambda x, y: [train(x, y)], optimizer=opt)
    loss, = step(x, y)
"""
from . import _tensorwire as _C

Trace = _C.graph.Trace
Capture = _C.graph.Capture
Step = _C.graph.Step

__all__ = ["Trace", "Capture", "Step"]
