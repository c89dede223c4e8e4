#!/usr/bin/env python3
"""The PyTorch side of `make bench-lowp`'s int8 row: nn.Linear(4096, 4096) made dynamic-int8 by
torch.ao.quantization.quantize_dynamic, on x [256, 4096], on each quantized engine this torch has
(Debian's has no fbgemm), and the f32 Linear. Prints one line per engine,
`engine NAME MS`, the fastest first, then `f32 MS` (medians of --repeats runs after a warm-up).
Run through bench/torch_env.sh's torch_py (OpenBLAS variables unset for this command alone)."""
import argparse
import time

import torch


def median_ms(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(1e3 * (time.perf_counter() - t0))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(53)
    lin = torch.nn.Linear(4096, 4096)
    x = torch.randn(256, 4096)
    rows = []
    with torch.no_grad():
        for engine in torch.backends.quantized.supported_engines:
            if engine == "none":
                continue
            torch.backends.quantized.engine = engine
            try:
                q = torch.ao.quantization.quantize_dynamic(
                    torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
                rows.append((median_ms(lambda: q(x), a.repeats), engine))
            except RuntimeError as e:  # an engine without a dynamic Linear here
                print(f"# engine {engine}: {e}".splitlines()[0])
        f32 = median_ms(lambda: lin(x), a.repeats)
    for ms, engine in sorted(rows):
        print(f"engine {engine} {ms:.3f}")
    print(f"f32 {f32:.3f}")


if __name__ == "__main__":
    main()
