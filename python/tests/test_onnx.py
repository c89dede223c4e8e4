"""tw.onnx: ONNX import from Python, and models exported by torch.onnx.export (Debian's
python3-torch; scripts/onnx_models.py) giving torch's outputs within 1e-5, on cpu and remote."""
import importlib.util
import os

import numpy as np
import pytest

import tensorwire as tw

TESTDATA = "/usr/share/libonnx-testdata/data"


def test_supported_ops_and_a_node_test():
    ops = tw.onnx.supported_ops()
    assert "Conv" in ops and "Gemm" in ops and ops == sorted(ops)
    d = os.path.join(TESTDATA, "node", "test_add_bcast")
    if not os.path.isdir(d):
        pytest.skip("libonnx-testdata is not installed")
    m = tw.onnx.load(os.path.join(d, "model.onnx"))
    assert m.input_names == ["x", "y"] and m.output_names == ["sum"]
    x, y = (tw.onnx.read_tensor(os.path.join(d, "test_data_set_0", f"input_{i}.pb")) for i in (0, 1))
    want = tw.onnx.read_tensor(os.path.join(d, "test_data_set_0", "output_0.pb"))
    (got,) = m.run(tw.Device.cpu(), [x, y])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_refusal_names_node_and_op(tmp_path):
    d = os.path.join(TESTDATA, "node", "test_nonzero_example")
    if not os.path.isdir(d):
        pytest.skip("libonnx-testdata is not installed")
    with pytest.raises(tw.Error, match=r"\(NonZero\): op type NonZero is not supported"):
        tw.onnx.load(os.path.join(d, "model.onnx"))


@pytest.fixture(scope="module")
def onnx_models(source_dir):
    torch = pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(
        "onnx_models", os.path.join(source_dir, "scripts", "onnx_models.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return torch, mod


@pytest.mark.parametrize("name", ["digits_cnn", "resnet", "transformer_lm"])
def test_torch_exported_model_matches_torch(onnx_models, name, tmp_path, device):
    torch, mod = onnx_models
    model, example = next((m, x) for n, m, x in mod.models() if n == name)
    path = str(tmp_path / (name + ".onnx"))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod.export(model, example, path)
    with torch.no_grad():
        want = model(example).numpy()
    m = tw.onnx.load(path)
    x = tw.from_numpy(example.numpy()).to(device)
    (got,) = m.run(device, [x])
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5)
    assert m.trace.runs_as_graph(device)
