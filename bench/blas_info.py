"""Which BLAS, and which of its kernels, the PyTorch side of a benchmark runs.

Debian's torch does its GEMMs through libblas.so.3 (OpenBLAS where installed). OpenBLAS picks its
kernels for the CPU at load time unless OPENBLAS_CORETYPE names a core (and OPENBLAS_L2_SIZE a
cache size): some machines of this kind set both for older builds, and Debian's torch then ran
matmul at 18% of the FMA peak. The bench scripts unset both in the PyTorch command alone
(bench/torch_env.sh; issue 53) and print what this module reports, so a table says which kernel
its baseline ran. Needs Debian's python3-threadpoolctl (scripts/bootstrap.sh installs it).
"""
import os

# Unset in the PyTorch command of every bench script (bench/torch_env.sh names the same two).
HANDICAP_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def describe():
    """One line: library, version, threading, the kernel (architecture) it runs, its threads;
    any handicap variable still set is named. Call after torch is imported."""
    try:
        import threadpoolctl
    except ImportError:
        return "unknown (no threadpoolctl: apt-get install python3-threadpoolctl)"
    blas = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    if not blas:
        return "none loaded"
    parts = []
    for i in blas:
        parts.append(f"{i.get('internal_api', '?')} {i.get('version') or ''} "
                     f"{i.get('threading_layer', '')} kernel {i.get('architecture', '?')}, "
                     f"{i.get('num_threads', '?')} threads ({os.path.basename(i.get('filepath', '?'))})"
                     .replace("  ", " "))
    still = [f"{v}={os.environ[v]}" for v in HANDICAP_VARS if v in os.environ]
    return "; ".join(parts) + (f"; set: {' '.join(still)}" if still else "")
