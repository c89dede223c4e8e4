"""PyTorch CUDA's side of the cuda backend's bench rows (scripts/device_check.sh --cuda): the same
products as bench/cuda_bench.cc on the same GPU, mean of 10 queued after a warm-up, in TFLOP/s, and
SDPA forward+backward on [8, 16, 2048, 128] bf16 (the attention row's target)."""
import time

import torch


def timed(fn, repeats=10):
    """Mean ms of `repeats` calls queued back to back, waited for once, after a warm-up."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t0) / repeats


def matmul_row(name, n, dtype, **kw):
    a = torch.randn(n, n, device="cuda").to(dtype)
    b = torch.randn(n, n, device="cuda").to(dtype)
    ms = timed(lambda: torch.matmul(a, b))
    print(f"{name:<28} {ms:9.3f} ms  {2 * n ** 3 / (ms * 1e-3) / 1e12:8.1f} TFLOP/s")


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    matmul_row("matmul bf16 8192^3 (bf16 out)", 8192, torch.bfloat16)
    matmul_row("matmul f32 4096^3 (exact)", 4096, torch.float32)
    q, k, v = (torch.randn(8, 16, 2048, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))

    for causal in (False, True):
        def attn():
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            o.sum().backward()

        name = "attention fwd+bwd" + (" causal" if causal else "")
        print(f"{name:<28} {timed(attn):9.3f} ms")


if __name__ == "__main__":
    main()
