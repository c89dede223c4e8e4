"""tw.graph: op traces (tensorwire/graph.h, docs/trace.md). A Capture over a device records the
ops issued to its tensors (and runs them on that device); finish() gives a Trace, which can be
saved, loaded and replayed on any device, where it runs as one registered graph when the device
can host one. Step caches a training step as a trace after its second call.

    cap = tw.graph.Capture(tw.Device.cpu())
    x = cap.input(x_cpu)
    y = (x * 2).relu().sum()
    trace = cap.finish()
    trace.save("step.twtrace")
    out, = tw.graph.Trace.load("step.twtrace").replay(remote, [x_cpu.to(remote)])

While a capture records, reading values (numpy, item, printing, .to() another device) raises
tw.Error: a trace cannot depend on values it has not computed."""
from . import _tensorwire as _C

TensorSpec = _C.graph.TensorSpec
Trace = _C.graph.Trace
Capture = _C.graph.Capture
Slot = _C.graph.Slot
Step = _C.graph.Step
state_slots = _C.graph.state_slots


def compile(fn, state=()):  # noqa: A001  (as torch.compile)
    """Step over fn(args) -> tensor or list of tensors, with optional state Slots."""
    return Step(fn, list(state))


__all__ = ["TensorSpec", "Trace", "Capture", "Slot", "Step", "state_slots", "compile"]
