"""Installs the Python package with pip into a temporary directory and uses it from there.

    python_install_test.py BUILD_DIR SOURCE_DIR

`pip install --no-build-isolation --no-deps --no-index --target T SOURCE_DIR` (setup.py packs
BUILD_DIR's build without building: TW_PIP_NO_BUILD), then, with only T on PYTHONPATH:
imports tensorwire from T and computes on the cpu (and torch, where the build has it) device;
starts `python3 -m tensorwire.server` on 127.0.0.1 port 0, which must run T's tensorwire-server,
reads back the address it bound, and trains a step on a remote device there; stops it with
SIGTERM (exit status 0). --target rather than the system's site-packages: Debian's Python is
externally managed (PEP 668). Exits non-zero, naming the step, on the first failure.
"""
import os
import sys

from support import Server, main, run

CLIENT = """
import sys, tensorwire as tw
import tensorwire.nn.functional as F  # a subpackage's module is installed too
assert tw.__file__.startswith(sys.argv[1]), tw.__file__
assert F.__file__.startswith(sys.argv[1]) and tw.__version__, F.__file__
devices = [tw.Device.cpu()] + ([tw.Device.torch()] if sys.argv[3] == "1" else [])
if sys.argv[2]:
    devices.append(tw.Device.remote(sys.argv[2]))
for dev in devices:
    model = tw.nn.Linear(4, 2, device=dev)
    opt = tw.optim.SGD(model.parameters(), lr=0.1)
    x = tw.ones(8, 4, device=dev)
    loss = model(x).square().mean()
    before = loss.item()
    opt.zero_grad(); loss.backward(); opt.step()
    after = model(x).square().mean().item()
    assert after < before, (str(dev), before, after)
    print(f"{dev}: loss {before:.4f} -> {after:.4f}")
"""


def test(tmp):
    build, source = (os.path.abspath(p) for p in sys.argv[1:3])
    python = sys.executable
    target = os.path.join(tmp, "site")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "TW_SERVER_BINARY")}
    run([python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
         "--no-cache-dir", "--disable-pip-version-check", "--target", target, source],
        env={**env, "TW_BUILD_DIR": build, "TW_PIP_NO_BUILD": "1"}, cwd=tmp)
    env["PYTHONPATH"] = target
    pkg = os.path.join(target, "tensorwire")
    has_torch = os.path.exists(os.path.join(pkg, "lib", "tensorwire", "libtw_backend_torch.so"))
    print(run([python, "-c", CLIENT, pkg, "", "1" if has_torch else "0"], env=env, cwd=tmp)
          .strip())

    server = Server([python, "-m", "tensorwire.server", "--listen", "tcp://127.0.0.1:0"],
                    env=env, cwd=tmp)
    try:
        exe = os.readlink(f"/proc/{server.proc.pid}/exe")
        if exe != os.path.join(pkg, "bin", "tensorwire-server"):
            raise AssertionError(f"python3 -m tensorwire.server runs {exe}, not the package's")
        print(run([python, "-c", CLIENT, pkg, server.url, "0"], env=env, cwd=tmp).strip())
    finally:
        server.stop()


if __name__ == "__main__":
    main(test, "python install test")
