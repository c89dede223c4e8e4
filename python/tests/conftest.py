"""Fixtures: one in-process server (tw.serve on 127.0.0.1 port 0) for the session, and `device`,
which runs a test once on the CPU device and once on a remote device of that server."""
import os

import pytest

import tensorwire as tw


@pytest.fixture(scope="session")
def server():
    with tw.serve() as s:
        yield s


@pytest.fixture(scope="session")
def remote(server):
    d = tw.Device.remote(server.url)
    d.connect()
    return d


@pytest.fixture(params=["cpu", "remote"])
def device(request):
    if request.param == "cpu":
        return tw.Device.cpu()
    return request.getfixturevalue("remote")


@pytest.fixture(scope="session")
def source_dir():
    return os.environ.get("TW_SOURCE_DIR",
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
