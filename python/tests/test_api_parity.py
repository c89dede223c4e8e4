"""The Python Tensor has every method of the C++ Tensor (include/tensorwire/tensor.h), and every
kind of include/tensorwire/op_kinds.h: the bindings are generated from those lists, and this test
catches a method added to tensor.h without its binding."""
import os
import re

import tensorwire as tw

# C++ methods with no Python method of the same name, and why.
CPP_ONLY = {
    "defined": "a Python Tensor is always defined",
    "sizes": "shape is the Python spelling",
    "size": "shape[dim] is the Python spelling",
    "id": "the device id is internal to the C++ API",
    "to_vector": "tolist()/numpy() are the Python spellings",
    "to_vector_async": "tolist()/numpy() are the Python spellings",
    "to_bytes": "numpy() gives the bytes",
    "host_values": "internal: numpy() is built on it",
    "host_values_async": "internal: numpy() is built on it",
    "host_values_pending": "internal: an asynchronous read with a readiness test (C++ trainers)",
    "to_string": "__repr__/__str__ are the Python spellings",
    "view": "reshape is the Python spelling",
    "expand_as": "expand(o.shape) is the Python spelling",
    "set_requires_grad": "requires_grad is a settable property in Python",
    "set_grad": "grad is a settable property in Python",
    "impl": "internal",
    "Tensor": "the constructor",
}


def read(source_dir, rel):
    return open(os.path.join(source_dir, rel), encoding="utf-8").read()


def kind_api_names(source_dir):
    text = read(source_dir, "include/tensorwire/op_kinds.h")
    names = {}
    for lst in ("UNARY", "BINARY", "REDUCE", "POOL"):
        body = re.search(r"#define TW_%s_KINDS\(X\)(.*?)(?:\n#define|\n// clang-format on)" % lst,
                         text, re.S).group(1)
        names[lst] = [m.group(1) for m in re.finditer(r"X\(\w+, \w+, (\w+)", body)]
        assert names[lst], lst
    return names


def tensor_methods(source_dir):
    text = read(source_dir, "include/tensorwire/tensor.h")
    body = re.search(r"class Tensor \{(.*?)\n\};", text, re.S).group(1)
    body = re.sub(r"#define.*?(?<!\\)\n", "\n", body, flags=re.S)  # the generated declarations
    body = re.sub(r"^\s+throw .*$", "", body, flags=re.M)  # statements of inline bodies
    found = set(re.findall(r"^\s+(?:std::function<[^;]*?>\s+|[\w:<>&,\s]+?[\s&*])?(\w+)\(", body, re.M))
    return found - {"if", "return", "for", "while", "static_cast", "TW_UNARY_KINDS",
                    "TW_BINARY_KINDS", "TW_REDUCE_KINDS"}


def test_every_kind_is_a_tensor_method(source_dir):
    names = kind_api_names(source_dir)
    for lst in ("UNARY", "BINARY", "REDUCE"):
        missing = [n for n in names[lst] if not callable(getattr(tw.Tensor, n, None))]
        assert not missing, f"op_kinds.h {lst} kinds without a tw.Tensor method: {missing}"
    missing = [n for n in names["POOL"] if not callable(getattr(tw, n, None))]
    assert not missing, f"pool kinds without a tw function: {missing}"


def test_every_cpp_tensor_method_is_bound(source_dir):
    methods = tensor_methods(source_dir)
    assert {"matmul", "reshape", "backward", "gather"} <= methods, sorted(methods)
    assert "impl" in methods  # the parse sees the whole class
    missing = sorted(m for m in methods - set(CPP_ONLY) if not hasattr(tw.Tensor, m))
    assert not missing, f"tensor.h methods without a tw.Tensor binding: {missing}"
    stale = sorted(set(CPP_ONLY) - methods)
    assert not stale, f"CPP_ONLY names no longer in tensor.h: {stale}"


def test_kind_methods_compute(source_dir):
    x = tw.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert x.reciprocal().tolist() == [[1.0, -0.5], [float(__import__("numpy").float32(1 / 3.0)), 0.25]]
    assert x.sum([0, 1]).item() == 6.0 and x.mean([0, 1]).item() == 1.5
    assert x.maximum(x.neg()).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert x.add(1).tolist() == [[2.0, -1.0], [4.0, 5.0]]
