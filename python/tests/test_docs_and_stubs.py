"""Docstrings carry docs/ops.md's semantics, and the type stubs cover the public API."""
import ast
import inspect
import os

import tensorwire as tw

PKG = os.path.dirname(tw.__file__)


def test_help_shows_the_ops_md_rows():
    doc = tw.Tensor.matmul.__doc__
    assert "inner dimensions differ" in doc and "1-D operands" in doc
    assert "Python's: result has the sign of the divisor" in tw.Tensor.remainder.__doc__
    assert "half-to-even" in tw.Tensor.round.__doc__
    assert "first occurrence wins" in tw.Tensor.argmax.__doc__
    assert "Conv2d" in tw.conv2d.__doc__


def stub_names(path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    names, classes = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body
                                  if isinstance(n, (ast.FunctionDef, ast.AnnAssign))
                                  for n in [n] if not isinstance(n, ast.AnnAssign)} | {
                n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
            names.add(node.name)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names, classes


def public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


def test_stub_covers_the_package():
    names, classes = stub_names(os.path.join(PKG, "__init__.pyi"))
    missing = public(tw) - names - {"annotations"}
    assert not missing, f"__init__.pyi lacks {sorted(missing)}"
    for cls in ("Tensor", "Device", "Server"):
        lacking = public(getattr(tw, cls)) - classes[cls]
        assert not lacking, f"{cls} in __init__.pyi lacks {sorted(lacking)}"
    dunders = {n for n in dir(tw.Tensor) if n.startswith("__") and n in vars(tw.Tensor)}
    lacking = {d for d in dunders if d not in classes["Tensor"] and d not in (
        "__init__", "__module__", "__doc__", "__dict__", "__weakref__", "__hash__",
        "__getstate__", "__setstate__")}
    lacking -= {n for n in lacking if not callable(getattr(tw.Tensor, n))}
    assert not lacking, f"Tensor in __init__.pyi lacks {sorted(lacking)}"


def test_stubs_for_nn_and_optim():
    for mod, stub in (("nn", "nn/__init__.pyi"), ("nn.functional", "nn/functional.pyi"),
                      ("optim", "optim.pyi"), ("dist", "dist.pyi"), ("graph", "graph.pyi"),
                      ("onnx", "onnx.pyi")):
        names, _ = stub_names(os.path.join(PKG, stub))
        obj = tw
        for part in mod.split("."):
            obj = getattr(obj, part)
        missing = public(obj) - names
        assert not missing, f"{stub} lacks {sorted(missing)}"
    assert os.path.exists(os.path.join(PKG, "py.typed"))


def test_signatures_are_visible():
    assert "device" in inspect.signature(tw.zeros).parameters
    assert "other" in tw.Tensor.add.__doc__
