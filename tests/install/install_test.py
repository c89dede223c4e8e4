"""Installs the build into a temporary prefix and uses it as a consumer would.

    install_test.py BUILD_DIR SOURCE_DIR

1. `cmake --install BUILD_DIR --prefix P`, then checks what was installed: the versioned
   library and its SONAME, the programs' RPATH, the CMake package, tensorwire.pc, the ONNX
   library libtensorwire_onnx.a with tensorwire-onnx.pc, the systemd unit (naming P's server)
   and the example configuration.
2. Compiles each installed public header alone against P (nothing of the source tree on the
   include path), so a header that includes something not installed fails.
3. Builds examples/cpp out of tree twice, with find_package(tensorwire) and with pkg-config
   (examples/cpp/Makefile), and runs both builds' programs; onnx_run (tensorwire::onnx,
   tensorwire-onnx) on a convolution model of ONNX's test data, checking the output's shape and
   sum; remote_fit against P's
   tensorwire-server, started on 127.0.0.1 port 0 (the address read back from its output, as
   tests/support/server_process.h does). Where the build has the torch backend the server hosts
   a torch device too, and must have loaded P's copy of the module.
Exits non-zero, naming the step, on the first failure.
"""
import concurrent.futures
import os
import re
import sys
import time

from support import Server, main, run

# A node test of Debian's libonnx-testdata (scripts/bootstrap.sh installs it): a 3x3 convolution,
# stride 2, padding 1, of x[1, 1, 7, 5] by W[1, 1, 3, 3], both inputs. With ones for both, each
# output is the number of the window's positions inside x: rows 2 3 3 2 times columns 2 3 2.
ONNX_MODEL = "/usr/share/libonnx-testdata/data/node/test_conv_with_strides_padding/model.onnx"
ONNX_OUTPUT = "output 0 'y': f32[1, 1, 4, 3] sum 70"

def check(cond, what):
    if not cond:
        raise AssertionError(what)


def dynamic(path):
    """The SONAME, NEEDED and RUNPATH entries of an ELF file."""
    out = run(["readelf", "-d", path])
    entries = {"SONAME": [], "NEEDED": [], "RUNPATH": [], "RPATH": []}
    for m in re.finditer(r"\((SONAME|NEEDED|RUNPATH|RPATH)\)\s+\S+.*?\[(.*)\]", out):
        entries[m.group(1)].append(m.group(2))
    return entries


def clean_env(prefix):
    """The environment without anything that could find the build tree's library instead."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH")}
    env["PKG_CONFIG_PATH"] = os.path.join(prefix, "lib", "pkgconfig")
    return env


def test(tmp):
    build, source = (os.path.abspath(p) for p in sys.argv[1:3])
    prefix = os.path.join(tmp, "prefix")
    env = clean_env(prefix)
    start = time.monotonic()
    run(["cmake", "--install", build, "--prefix", prefix])

    # 1. What was installed.
    lib_dir = os.path.join(prefix, "lib")
    libs = sorted(f for f in os.listdir(lib_dir) if f.startswith("libtensorwire.so"))
    check(len(libs) == 3, f"lib/ holds {libs}, not the library, its SONAME link and dev link")
    real = os.path.realpath(os.path.join(lib_dir, "libtensorwire.so"))
    soname = dynamic(real)["SONAME"]
    check(len(soname) == 1 and re.fullmatch(r"libtensorwire\.so\.\d+(\.\d+)?", soname[0]),
          f"libtensorwire.so's SONAME is {soname}")
    check(os.path.realpath(os.path.join(lib_dir, soname[0])) == real,
          f"lib/{soname[0]} does not lead to {real}")
    for prog in ("tensorwire-server", "tensorwire"):
        d = dynamic(os.path.join(prefix, "bin", prog))
        check(d["RUNPATH"] + d["RPATH"] == ["$ORIGIN/../lib"],
              f"bin/{prog}'s RUNPATH is {d['RUNPATH'] + d['RPATH']}, not $ORIGIN/../lib")
        check(soname[0] in d["NEEDED"], f"bin/{prog} does not need {soname[0]}")
    for f in ("lib/cmake/tensorwire/tensorwireConfig.cmake",
              "lib/cmake/tensorwire/tensorwireConfigVersion.cmake",
              "lib/pkgconfig/tensorwire.pc", "lib/libtensorwire_onnx.a",
              "lib/pkgconfig/tensorwire-onnx.pc", "include/tensorwire/onnx.h",
              "lib/systemd/system/tensorwire-server.service",
              "share/tensorwire/tensorwire-server.conf", "include/tensorwire/tensorwire.h"):
        check(os.path.isfile(os.path.join(prefix, f)), f"{f} was not installed")
    with open(os.path.join(prefix, "lib/systemd/system/tensorwire-server.service")) as f:
        unit = f.read()
    check(f"ExecStart={prefix}/bin/tensorwire-server " in unit,
          "the unit's ExecStart does not name the prefix's tensorwire-server")
    check("@" not in unit.replace("@system-service", ""), "the unit has an unfilled @VAR@")
    check(run(["pkg-config", "--variable=prefix", "tensorwire"], env=env).strip() == prefix,
          "tensorwire.pc's prefix is not the install prefix")
    onnx_libs = run(["pkg-config", "--libs", "tensorwire-onnx"], env=env).split()
    for flag in ("-ltensorwire_onnx", "-lonnx_proto", "-ltensorwire", "-lprotobuf"):
        check(flag in onnx_libs, f"pkg-config --libs tensorwire-onnx gives {onnx_libs}, no {flag}")
    check(onnx_libs.index("-ltensorwire_onnx") < onnx_libs.index("-ltensorwire"),
          f"pkg-config --libs tensorwire-onnx gives {onnx_libs}: the archive after its library")
    run([os.path.join(prefix, "bin", "tensorwire-server"), "--help"], env=env)

    # 2. Each public header compiles alone against the prefix.
    include = os.path.join(prefix, "include")
    headers = sorted(os.path.relpath(os.path.join(d, f), include)
                     for d, _, fs in os.walk(include) for f in fs if f.endswith(".h"))
    cxx = os.environ.get("CXX", "c++")

    def compile_header(h):
        return run([cxx, "-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                    "-I", include, "-x", "c++", "-"], input=f"#include <{h}>\n", env=env)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(compile_header, headers))
    print(f"{len(headers)} installed headers compile alone: {time.monotonic() - start:.1f} s")

    # 3. The examples, out of tree, with CMake and with pkg-config.
    examples = os.path.join(source, "examples", "cpp")
    cmake_out = os.path.join(tmp, "cmake-build")
    # Unoptimised: the builds check that the examples compile, link and run, and -O0
    # compiles them in a fraction of the time.
    run(["cmake", "-S", examples, "-B", cmake_out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=",
         f"-DCMAKE_PREFIX_PATH={prefix}"], env=env)
    run(["cmake", "--build", cmake_out, "-j", "2"], env=env)
    pc_out = os.path.join(tmp, "pkgconfig-build")
    run(["make", "-C", examples, f"OUT={pc_out}", "CXXFLAGS=-O0", "-j", "2"], env=env)
    print(f"examples built: {time.monotonic() - start:.1f} s")
    outs = {"cmake": cmake_out, "pkg-config": pc_out}
    for how, out in outs.items():
        needed = dynamic(os.path.join(out, "hello"))["NEEDED"]
        check(soname[0] in needed, f"the {how} build of hello does not need {soname[0]}")
        print(f"{how} hello:", run([os.path.join(out, "hello")], env=env).strip())
        onnx_run = os.path.join(out, "onnx_run")
        check(os.path.isfile(onnx_run), f"the {how} build made no onnx_run")
        check(soname[0] in dynamic(onnx_run)["NEEDED"],
              f"the {how} build of onnx_run does not need {soname[0]}")
        printed = run([onnx_run, ONNX_MODEL], env=env)
        check(ONNX_OUTPUT in printed.splitlines(),
              f"the {how} build of onnx_run printed\n{printed}not {ONNX_OUTPUT!r}")
        print(f"{how} onnx_run:", printed.strip().replace("\n", "; "))

    torch_module = os.path.join(lib_dir, "tensorwire", "libtw_backend_torch.so")
    has_torch = os.path.exists(torch_module)
    server = Server([os.path.join(prefix, "bin", "tensorwire-server"), "--listen",
                     "tcp://127.0.0.1:0", *(["--backend", "cpu,torch"] if has_torch else [])],
                    env=env)
    try:
        for how, out in outs.items():
            print(f"{how} remote_fit:",
                  run([os.path.join(out, "remote_fit"), server.url], env=env).strip())
        print(run([os.path.join(prefix, "bin", "tensorwire"), "info", server.url],
                  env=env).strip())
        if has_torch:
            # The torch device loads its module at start; it must be the installed copy.
            with open(f"/proc/{server.proc.pid}/maps") as f:
                maps = f.read()
            check(torch_module in maps,
                  f"the server from {prefix} did not load {torch_module}")
    finally:
        server.stop()


if __name__ == "__main__":
    main(test, "install test")
