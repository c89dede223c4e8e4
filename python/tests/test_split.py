"""examples/split_gpt.py trains a GPT split over two in-process servers (a short run): as a
pipeline (tw.nn.place, tw.nn.Pipeline, activations moving server to server) and tensor-parallel
(tw.nn.TensorParallelGPT); and tw.nn.place refuses a model that does not fit, naming the sizes."""
import os
import subprocess
import sys

import pytest

import tensorwire as tw
from tensorwire import nn

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "split_gpt.py")


@pytest.mark.parametrize("mode", ["pipeline", "tensor"])
def test_example_trains_split(mode):
    r = subprocess.run([sys.executable, EXAMPLE, "--mode", mode, "--steps", "8", "--layers", "2",
                        "--embd", "64"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "step 8: loss" in r.stdout
    assert "sample" in r.stdout
    if mode == "pipeline":
        assert "placed: " in r.stdout and "layers 0-" in r.stdout


def test_place_refuses_a_model_that_does_not_fit():
    # The model's parameters take 209 KiB: half on each server fits, training it (4x) does not.
    servers = [tw.serve(max_memory_bytes=150 << 10) for _ in range(2)]
    try:
        devices = [tw.Device.remote(s.url) for s in servers]
        tw.manual_seed(0)
        model = nn.GPT(32, context=16, n_layer=4, n_head=2, n_embd=32)
        with pytest.raises(tw.Error, match="does not fit"):
            nn.place(model, devices, memory_factor=4)
        assert all(p.data.device == tw.Device.cpu() for p in model.parameters())  # none moved
        plan = nn.place(model, devices, layers=[3, 3])
        assert plan.first == [0, 3, 6]
        assert plan.device_of(5) == devices[1]
        assert model.parameters()[-1].data.device == devices[1]
        assert sum(plan.bytes) == sum(p.data.numel() * 4 for p in model.parameters())
    finally:
        for s in servers:
            s.stop()


def test_pipeline_generator_prefill_chunks():
    # The prompt prefilled in chunks over two servers gives the tokens the same chunking gives on
    # one server, bit for bit, with graphs and without; a negative count is refused.
    servers = [tw.serve() for _ in range(2)]
    try:
        devices = [tw.Device.remote(s.url) for s in servers]
        prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]
        runs = {}
        for name, devs, layers in [("one", devices[:1], [4]), ("two", devices, [2, 2])]:
            tw.manual_seed(1)
            model = nn.GPT(32, context=32, n_layer=2, n_head=2, n_embd=32)
            pipe = nn.Pipeline(model, nn.place(model, devs, layers=layers))
            for use_graph in (True, False):
                gen = nn.PipelineGenerator(pipe, prefill_chunks=3, use_graph=use_graph)
                runs[name, use_graph] = [gen.generate(prompt, 6, temperature=0.8, seed=7)
                                         for _ in range(3)]
                assert (gen.graph_replays > 0) == use_graph
        assert len(runs["one", True][0]) == 6
        assert all(r == runs["one", True] for r in runs.values()), runs
        with pytest.raises(tw.Error, match="prefill_chunks"):
            nn.PipelineGenerator(pipe, prefill_chunks=-1)
    finally:
        for s in servers:
            s.stop()
