"""tw.onnx: ONNX import (tensorwire/onnx.h, docs/onnx.md). load() turns an ONNX model file into
a Model whose trace runs on any device (cpu, torch, remote as one registered graph).

    m = tw.onnx.load("model.onnx")
    y, = m.run(tw.Device.cpu(), [x])

Each supported ONNX op maps onto tensorwire's ops; a model using anything else is refused with an
error naming the node, op type and attribute."""
from . import _tensorwire as _C

Model = _C.onnx.Model
load = _C.onnx.load
read_tensor = _C.onnx.read_tensor
supported_ops = _C.onnx.supported_ops

__all__ = ["Model", "load", "read_tensor", "supported_ops"]
