#!/usr/bin/env bash
# Installs the Debian 12 packages needed to build and test tensorwire, and nothing else.
#   scripts/bootstrap.sh                    the build and test toolchain (what `make test` needs)
#   scripts/bootstrap.sh PKG...             that list plus PKG... (bench/compare_torch.sh adds
#                                           python3-torch python3-numpy; the bench scripts with a
#                                           PyTorch side add python3-threadpoolctl)
#   scripts/bootstrap.sh --run              only what configuring and `make run` need (no torch,
#                                           clang, Python, chromium: a fraction of the download)
# Before installing it prints the packages and the download size apt reports. With
# TW_BOOTSTRAP_STAMP=FILE it touches FILE after installing anything (the Makefile then configures
# again, so CMake finds what came).
# Fast when everything is present: one dpkg-query, no network. Only when something is
# missing does it run `apt-get update` once and install the missing packages (as root), so it
# works on a fresh Debian 12 that reaches only Debian's mirror. Prints one line either way.
set -euo pipefail

# libtorch-dev: the torch backend (src/backend/torch), which `make test` builds and tests; a
# build without it configures, builds and passes everything else. libssl-dev: TLS (src/net);
# openssl: the CLI tests/integration/tls_test.cc makes its CA and certificates with. clang-16 and
# libclang-rt-16-dev (libFuzzer and the sanitizer runtimes): `make fuzz` (tests/fuzz). python3-dev,
# pybind11-dev, python3-numpy, python3-pytest: the Python package (python/) and its tests.
# prometheus-cpp-dev, libcpp-httplib-dev: the --metrics endpoint; chromium: its dashboard's test
# (headless), which skips without it. libgloo-dev: collectives across servers
# (src/server/collective.cc). clang-format: `make format` and `make format-check` (.ci/run).
# python3-pip, python3-setuptools, python3-wheel: `pip install --no-build-isolation .`
# (pyproject.toml) and its test (tests/install).
# libonnx-dev (ONNX's generated protobuf classes, with protobuf): the ONNX importer (src/onnx);
# libonnx-testdata: ONNX's backend test models that tests/onnx/conformance_test.cc runs;
# python3-torch: python/tests/test_onnx.py exports PyTorch models with torch.onnx.export.
# libzstd-dev: compressed frames (src/protocol/compress.cc); libxxhash-dev: the content hash of
# deduplicated uploads (src/protocol/content_hash.cc); iproute2: the shaped link of
# tests/support/shaped_link.h (ip, tc).
# libvulkan-dev and glslc: the vulkan backend (src/backend/vulkan: the loader's headers, and the
# GLSL compiler its shaders are built with); mesa-vulkan-drivers (lavapipe, a Vulkan device on
# the CPU) and vulkan-validationlayers: its tests; vulkan-tools: vulkaninfo (docs/vulkan.md).
# What configuring needs (the root CMakeLists.txt's REQUIRED packages, and GoogleTest and Google
# Benchmark, which it finds when the tests and benchmarks are on) and `make run` builds with.
run_packages=(build-essential cmake ninja-build g++ pkg-config zlib1g-dev libdnnl-dev libasio-dev
              libssl-dev libzstd-dev libxxhash-dev prometheus-cpp-dev libcpp-httplib-dev
              libgloo-dev libonnx-dev libgtest-dev libgmock-dev googletest libbenchmark-dev)
if [[ "${1:-}" == "--run" ]]; then
  shift
  packages=("${run_packages[@]}" "$@")
else
packages=(build-essential cmake ninja-build g++ pkg-config clang-format libgtest-dev libgmock-dev googletest zlib1g-dev
          libonnx-dev libonnx-testdata
          libbenchmark-dev libdnnl-dev libasio-dev libssl-dev openssl libtorch-dev python3 clang-16
          libclang-rt-16-dev python3-dev pybind11-dev python3-numpy python3-pytest python3-pip
          python3-setuptools python3-wheel
          prometheus-cpp-dev libcpp-httplib-dev chromium libgloo-dev python3-torch
          libzstd-dev libxxhash-dev iproute2
          libvulkan-dev glslc mesa-vulkan-drivers vulkan-validationlayers vulkan-tools "$@")
fi

# One dpkg-query for all of them (it exits non-zero when some are unknown; their lines are absent).
installed=" $(dpkg-query -W -f='${Package}=${Status}\n' "${packages[@]}" 2>/dev/null |
              sed -n 's/=install ok installed$//p' | tr '\n' ' ' || true) "
missing=()
for pkg in "${packages[@]}"; do
  [[ "$installed" == *" $pkg "* ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi

install_cmd="DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "bootstrap: missing ${missing[*]}; as root run: apt-get update && $install_cmd" >&2
  exit 1
fi

# apt's own progress goes to a log so that success stays one line; on failure, show it.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "bootstrap: installing ${missing[*]} (apt-get, as root)"
if ! apt-get update >"$log" 2>&1; then
  cat "$log" >&2
  echo "bootstrap: apt-get update failed (output above)" >&2
  exit 1
fi
# What apt will fetch, with their dependencies: at a few tens of MB/s, about a minute per
# 500 MB fetched and unpacked.
size=$(apt-get install -s --no-install-recommends "${missing[@]}" 2>/dev/null |
       grep -c '^Inst ' || true)
fetch=$(DEBIAN_FRONTEND=noninteractive apt-get install --no-install-recommends --assume-no \
          "${missing[@]}" 2>/dev/null | sed -n 's/^Need to get \([^ ]* [kMG]*B\).*/\1/p' || true)
echo "bootstrap: that is ${size} packages with their dependencies, ${fetch:-an unknown size} to" \
     "download (about a minute per 500 MB on a fast mirror)"
start=$(date +%s)
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       "${missing[@]}" >"$log" 2>&1; then
  cat "$log" >&2
  echo "bootstrap: failed to install ${missing[*]} (apt output above)" >&2
  exit 1
fi
if [[ -n "${TW_BOOTSTRAP_STAMP:-}" ]]; then
  mkdir -p "$(dirname "$TW_BOOTSTRAP_STAMP")" && touch "$TW_BOOTSTRAP_STAMP"
fi
echo "bootstrap: installed ${missing[*]} in $(( $(date +%s) - start )) s"
