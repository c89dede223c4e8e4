"""Builds the tensorwire Python package for pip (pyproject.toml): `pip install --no-build-isolation .`

The package is what the project's CMake build installs as its "python" component
(python/CMakeLists.txt): the Python files, the pybind11 extension, and the library, the torch
backend module and tensorwire-server under tensorwire/lib and tensorwire/bin. So pip drives CMake
rather than compiling anything itself: one build, offline, with Debian's packages. The build used:
  $TW_BUILD_DIR, if set (configured or not);
  else build/, when it is configured (the developer's `make build`: reused, so nothing recompiles);
  else build-pip/, configured here without tests and benchmarks.
It is (re)built for target tw_python_package, for the interpreter running pip; with
TW_PIP_NO_BUILD=1 it is packed as it is, unbuilt (tests/install/python_install_test.py, which must
not build in a build directory whose tests are running).
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(tensorwire VERSION ([0-9.]+)", f.read()).group(1)


def build_dir():
    if os.environ.get("TW_BUILD_DIR"):
        return os.path.abspath(os.environ["TW_BUILD_DIR"])
    default = os.path.join(ROOT, "build")
    if os.path.exists(os.path.join(default, "CMakeCache.txt")):
        return default
    return os.path.join(ROOT, "build-pip")


def run(cmd):
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


class BuildWithCMake(build_ext):
    """Builds and stages the package with CMake, then copies it into build_lib. (The build_ext
    step: setuptools runs it for a distribution with compiled code, which BinaryDistribution
    says this is; there are no Extension objects for it to compile itself.)"""

    def run(self):
        build = build_dir()
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 "-DTW_BUILD_TESTS=OFF", "-DTW_BUILD_BENCH=OFF", f"-DTW_PYTHON={sys.executable}"])
        if not os.environ.get("TW_PIP_NO_BUILD"):
            run(["cmake", "--build", build, "--target", "tw_python_package"])
        stage = os.path.join(build, "python-stage")
        shutil.rmtree(stage, ignore_errors=True)
        run(["cmake", "--install", build, "--component", "python", "--prefix", stage])
        pkg = os.path.join(stage, "tensorwire")

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        if not any(f.startswith("_tensorwire") and f.endswith(suffix) for f in os.listdir(pkg)):
            sys.exit(f"setup.py: {build} built the extension for another Python than "
                     f"{sys.executable} (no _tensorwire{suffix}); configure it with "
                     f"-DTW_PYTHON={sys.executable}, or set TW_BUILD_DIR to a new directory")
        # A wheel holds no symbolic links: the library goes in under its SONAME (what the
        # extension and the server need), as one file.
        lib = os.path.join(pkg, "lib")
        for name in os.listdir(lib):
            path = os.path.join(lib, name)
            if os.path.islink(path):
                target = os.path.realpath(path)
                os.unlink(path)
                os.replace(target, path)

        dest = os.path.join(self.build_lib, "tensorwire")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(pkg, dest)


class BinaryDistribution(Distribution):
    """A platform wheel: the package holds compiled code."""

    def has_ext_modules(self):
        return True


# setuptools' own build and metadata directories go into the CMake build directory: its default
# build/ is CMake's, and the source tree stays clean.
_work = os.path.join(build_dir(), "python-setuptools")
os.makedirs(_work, exist_ok=True)
setup(
    version=project_version(),
    cmdclass={"build_ext": BuildWithCMake},
    distclass=BinaryDistribution,
    options={"build": {"build_base": _work}, "egg_info": {"egg_base": _work}},
)
