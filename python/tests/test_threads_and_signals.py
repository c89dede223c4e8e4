"""The GIL is released while a remote device computes, and Ctrl-C interrupts a long wait without
breaking the session."""
import _thread
import threading
import time

import numpy as np
import pytest

import tensorwire as tw


def long_work(device, n=240):
    x = tw.randn(512, 512, device=device)
    for _ in range(n):
        x = (x @ x).tanh()
    return x


def test_other_threads_run_during_a_remote_sync(remote):
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    x = long_work(remote)
    thread = threading.Thread(target=spin)
    thread.start()
    try:
        time.sleep(0.01)
        before = counter[0]
        t0 = time.perf_counter()
        remote.sync()
        waited = time.perf_counter() - t0
        progressed = counter[0] - before
    finally:
        stop.set()
        thread.join()
    assert waited > 0.1, "the work was too short to tell"
    # A thread holding the GIL through the sync would leave the counter almost where it was.
    assert progressed > 10000, (progressed, waited)
    assert x.shape == (512, 512)


def test_other_threads_run_during_a_remote_read(remote):
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    x = long_work(remote)
    thread = threading.Thread(target=spin)
    thread.start()
    try:
        before = counter[0]
        x.sum().item()
        progressed = counter[0] - before
    finally:
        stop.set()
        thread.join()
    assert progressed > 10000


def test_ctrl_c_interrupts_a_long_sync_and_the_session_survives(remote):
    x = long_work(remote, n=600)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    timer.start()
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        remote.sync()
    interrupted_after = time.perf_counter() - t0
    timer.join()
    assert interrupted_after < 2.0
    # The session is intact: the queued work completes and new work runs.
    remote.sync()
    assert x.shape == (512, 512)
    np.testing.assert_array_equal((tw.arange(4, device=remote) * 2).numpy(), [0, 2, 4, 6])


def test_threads_share_a_device(remote):
    results = {}

    def work(k):
        t = tw.full([100], k, device=remote)
        for _ in range(50):
            t = t + 1
        results[k] = t.sum().item()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: 100 * (k + 50) for k in range(4)}
