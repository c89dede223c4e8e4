"""What test_torch_snippets.py cannot compare with torch: device strings naming servers,
credentials and TLS pins per device, tw.serve()'s options, in-place ops' rebinding, and the
messages of refused index forms."""
import os
import re
import urllib.request

import numpy as np
import pytest

import tensorwire as tw
import tensorwire.nn.functional as F


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", tw.__version__)


def test_functional_is_a_module():
    import importlib
    assert importlib.import_module("tensorwire.nn.functional") is tw.nn.functional is F
    x = tw.tensor([[-1.0, 2.0]])
    assert F.relu(x).tolist() == [[0.0, 2.0]]


def test_serve_options_are_the_headers_members(source_dir):
    header = open(os.path.join(source_dir, "include", "tensorwire", "server.h")).read()
    start = header.index("struct ServerOptions {") + len("struct ServerOptions {")
    body = re.sub(r"(?m)^\s*//[^\n]*|(?<=;)\s*//[^\n]*", "", header[start:header.index("template <class V>", start)])
    declared = []
    for stmt in filter(None, (s.strip() for s in body.split(";"))):
        stmt = re.sub(r"\s*(=.*|\{.*\})$", "", stmt, flags=re.S)
        declared += [n.strip() for n in stmt.split(None, 1)[1].split(",")]
    assert len(declared) > 20 and tw.serve_options() == declared


def test_serve_refuses_unknown_and_mistyped_options():
    with pytest.raises(tw.Error, match="unknown option 'max_session'.*max_sessions"):
        tw.serve(max_session=3)
    with pytest.raises(tw.Error, match="option 'devices' takes an int >= 0, got 'two'"):
        tw.serve(devices="two")
    with pytest.raises(tw.Error, match="option 'resume_grace' takes seconds"):
        tw.serve(resume_grace=-1)


def test_device_strings_name_one_session_per_url(server):
    d = tw.device(server.url)
    assert d == tw.device(server.url) and d.kind == "remote" and d.type == "remote"
    assert d == server.url and tw.device("cpu") == "cpu"
    x = tw.tensor([1.0, 2.0], device=server.url)
    y = tw.ones(2, device=server.url) + x  # same session: the ops combine
    assert y.to("cpu").device == tw.Device.cpu()
    assert y.cpu().tolist() == [2.0, 3.0]
    assert tw.device(str(d)) == d  # what str(Device) prints parses back
    # Every argument the C++ module takes as a Device takes the string too.
    assert tw.Device(server.url) == d and tw.Device("cpu") == tw.Device.cpu()
    lin = tw.nn.Linear(2, 3, device=server.url)
    assert lin.weight.data.device == d
    assert lin.to("cpu").weight.data.device == tw.Device.cpu()
    assert tw.wire_counters(server.url).ops > 0
    with pytest.raises(tw.Error, match="unknown backend 'npu'"):
        tw.zeros(2, device="npu:0")


def test_credentials_per_device():
    with tw.serve(credential="s3cret", metrics="tcp://127.0.0.1:0") as s:
        assert tw.remote_devices(s.url, credential="s3cret")[0].backend == "cpu"
        good = tw.Device.remote(s.url, credential="s3cret")
        assert (tw.ones(3, device=good) * 2).sum().item() == 6.0
        bad = tw.Device.remote(s.url, credential="wrong")
        with pytest.raises(tw.Error, match="(?i)unauthori[sz]ed|credential"):
            bad.connect()
        with urllib.request.urlopen(s.metrics_url + "/metrics", timeout=10) as r:
            assert b"tensorwire_" in r.read()


def test_tls_pinned_per_device():
    with tw.serve(tls=True, credential="k") as s:
        assert s.url.startswith("tls://") and s.tls_self_signed
        fp = s.tls_fingerprint
        assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", fp)
        d = tw.Device.remote(s.url, credential="k", tls_fingerprint=fp)
        assert tw.tensor([1.0, 2.0], device=d).sum().item() == 3.0
        wrong = tw.Device.remote(s.url, credential="k", tls_fingerprint="00" * 32)
        with pytest.raises(tw.Error):
            wrong.connect()


def test_inplace_rebinds_the_object_and_refuses_grad_leaves(device):
    x = tw.tensor([1.0, 2.0], device=device)
    alias = x
    view = x[0:1]
    assert x.add_(1) is x and alias.tolist() == [2.0, 3.0]
    assert view.tolist() == [1.0]  # documented: a tensor made before keeps the old values
    leaf = tw.ones(2, requires_grad=True)
    with pytest.raises(tw.Error, match="mul_: a leaf tensor that requires grad"):
        leaf.mul_(2)
    i = tw.tensor([1, 2])
    with pytest.raises(tw.Error, match="add_: the result's dtype f32 cannot be written"):
        i.add_(0.5)
    with pytest.raises(tw.Error, match="add_: the result's shape"):
        x.add_(tw.ones(3, 2, device=device))


def test_max_over_a_dim_unpacks_as_values_and_indices(device):
    x = tw.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], device=device)
    vals, idx = x.max(dim=1)
    assert vals.tolist() == [5.0, 7.0] and idx.tolist() == [1, 0]
    assert x.min(1).indices.tolist() == [0, 1]


@pytest.mark.parametrize("index,message", [
    (1.5, "got float 1.5"),
    ("a", "got str 'a'"),
    ([0.5, 1.0], "must hold ints or bools"),
    (([0, 1], [1, 0]), "2 integer-array indices at once"),
])
def test_unsupported_index_forms_say_what_is_supported(index, message):
    x = tw.zeros(3, 3)
    with pytest.raises(IndexError, match=re.escape(message)):
        x[index]


def test_list_index_on_remote(remote):
    a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    x = tw.tensor(a, device=remote)
    np.testing.assert_array_equal(x[[2, 0]].numpy(), a[[2, 0]])
    np.testing.assert_array_equal(x[:, [1, 3]].numpy(), a[:, [1, 3]])
    x[[0, 2]] = 1.0
    a[[0, 2]] = 1.0
    np.testing.assert_array_equal(x.numpy(), a)


def test_random_fills_in_place(device):
    x = tw.zeros(2000, device=device)
    x.uniform_(2.0, 3.0)
    assert 2.0 <= x.min().item() and x.max().item() < 3.0
    x.normal_(5.0, 0.5)
    assert abs(x.mean().item() - 5.0) < 0.1 and abs(x.std().item() - 0.5) < 0.1


def test_parameter_in_place_only_under_no_grad():
    lin = tw.nn.Linear(2, 2)
    w = lin.weight
    with pytest.raises(tw.Error, match="zero_: a Parameter"):
        w.zero_()
    with tw.no_grad():
        w.zero_()
        w += 1.5
    assert lin.weight.data.tolist() == [[1.5, 1.5], [1.5, 1.5]]
    assert lin.weight.data.requires_grad
