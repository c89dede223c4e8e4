"""examples/train_digits.py trains (a short run, so the suite stays fast): once with a server it
starts itself (tw.serve), once against the real tensorwire-server binary (--server)."""
import os
import subprocess
import sys

import pytest

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "train_digits.py")


def run_example(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, EXAMPLE, *args], env=env, capture_output=True,
                          text=True, timeout=240)


def test_trains_on_an_in_process_server():
    r = run_example("--epochs", "3", "--min-accuracy", "0.85")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "served in-process" in r.stdout
    assert "epoch 3/3 [########################]" in r.stdout  # the progress bar finished
    assert "target >= 85%: met" in r.stdout


def test_trains_on_a_tensorwire_server_process():
    binary = os.environ.get("TW_SERVER_BINARY")
    if not binary or not os.path.exists(binary):
        pytest.skip("TW_SERVER_BINARY is not set (ctest sets it)")
    server = subprocess.Popen([binary, "--listen", "tcp://127.0.0.1:0"], stdout=subprocess.PIPE,
                              text=True)
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on "), line
        url = line.split()[-1]
        r = run_example("--server", url, "--epochs", "1", "--min-accuracy", "0.5")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "served in-process" not in r.stdout and url in r.stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
