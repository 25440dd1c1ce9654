"""Attention speed and memory: teaching path vs fused SDPA, and our MultiHeadAttention vs nn.MultiheadAttention.

Run: .venv/bin/python benchmarks/bench_attention.py [--quick]
Every number is a median of interleaved repetitions; ratios compare against a baseline measured in the same run.
Peak memory is measured in a fresh subprocess per case (ru_maxrss high-water mark) on CPU, or with
torch.cuda.max_memory_allocated on GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).parent))
from _timing import interleaved_medians, print_table  # noqa: E402

from transformer_lib import MultiHeadAttention, default_device, scaled_dot_product_attention  # noqa: E402

B, H, D = 4, 8, 64

_PEAK_SCRIPT = """
import resource, sys, json, torch
from transformer_lib import scaled_dot_product_attention as sdpa
T, causal, teaching, dev = int(sys.argv[1]), sys.argv[2] == '1', sys.argv[3] == '1', sys.argv[4]
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn({B}, {H}, T, {D}, generator=g).to(dev) for _ in range(3))
def run():
    with torch.inference_mode():
        return sdpa(q, k, v, is_causal=causal, need_weights=teaching)
if dev == 'cuda':
    run()  # warm-up: kernels loaded before the measurement
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    run(); torch.cuda.synchronize(); peak = torch.cuda.max_memory_allocated() - base
else:  # the process's high-water mark: measure the first call (a warm-up would already have set it)
    run_small = sdpa(q[..., :8, :], k[..., :8, :], v[..., :8, :], is_causal=causal, need_weights=teaching)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    run(); peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps(peak))
""".format(B=B, H=H, D=D)


def peak_bytes(T: int, causal: bool, teaching: bool, device: str) -> int:
    """Extra peak memory of one attention call beyond its inputs, measured in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(T), str(int(causal)), str(int(teaching)), device],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_sdpa(lengths, device, repeats) -> None:
    print(
        f"\n## Teaching path (explicit softmax(QK^T/sqrt(d))V) vs F.scaled_dot_product_attention"
        f"\nB={B}, H={H}, d_head={D}, fp32, {device}; scores tensor alone = B*H*T*T*4 bytes"
    )
    rows = []
    for T in lengths:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, H, T, D, generator=g).to(device) for _ in range(3))
        for causal in (False, True):
            with torch.inference_mode():
                med = interleaved_medians(
                    {
                        "teaching": lambda: scaled_dot_product_attention(q, k, v, is_causal=causal, need_weights=True),
                        "fast": lambda: scaled_dot_product_attention(q, k, v, is_causal=causal),
                        "torch": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal),
                    },
                    repeats=repeats if T < 2048 else max(3, repeats // 2),
                    device=device,
                )
            mem_t, mem_f = peak_bytes(T, causal, True, device), peak_bytes(T, causal, False, device)
            rows.append(
                [
                    T,
                    "yes" if causal else "no",
                    f"{med['teaching'] * 1e3:.2f}",
                    f"{med['fast'] * 1e3:.2f}",
                    f"{med['torch'] * 1e3:.2f}",
                    f"{med['teaching'] / med['fast']:.2f}x",
                    f"{B * H * T * T * 4 / 2**20:.0f}",
                    f"{mem_t / 2**20:.0f}",
                    f"{mem_f / 2**20:.0f}",
                ]
            )
    print_table(
        [
            "T",
            "causal",
            "teaching ms",
            "fast ms",
            "F.sdpa ms",
            "teaching/fast",
            "scores MiB",
            "peak teaching MiB",
            "peak fast MiB",
        ],
        rows,
    )


def bench_mha(device, repeats, batch=8, T=256, d_model=512, n_heads=8) -> None:
    print(
        f"\n## MultiHeadAttention vs nn.MultiheadAttention (self-attention, B={batch}, T={T}, d_model={d_model}, "
        f"{n_heads} heads, eval, inference_mode, {device})"
    )
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True).to(device).eval()
    ours = MultiHeadAttention(d_model, n_heads).to(device).eval().load_from_torch(ref)
    x = torch.randn(batch, T, d_model, device=device)
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    with torch.inference_mode():
        max_diff = (ours(x)[0] - ref(x, x, x, need_weights=False)[0]).abs().max().item()
        med = interleaved_medians(
            {
                "nn.MultiheadAttention": lambda: ref(x, x, x, need_weights=False),
                "ours (fast path)": lambda: ours(x),
                "ours (teaching, weights)": lambda: ours(x, need_weights=True),
                "nn.MHA causal": lambda: ref(x, x, x, attn_mask=~causal, need_weights=False),
                "ours causal": lambda: ours(x, is_causal=True),
            },
            repeats=repeats,
            device=device,
        )
    base = med["nn.MultiheadAttention"]
    rows = [[name, f"{t * 1e3:.2f}", f"{t / base:.2f}x"] for name, t in med.items()]
    print_table(["module", "ms", "time / nn.MHA"], rows)
    print(f"max |ours - nn.MHA| = {max_diff:.2e}")
    print(
        f"ratio ours/nn.MHA (no mask): {med['ours (fast path)'] / base:.2f}x   target <= 1.0x; "
        f"causal: {med['ours causal'] / med['nn.MHA causal']:.2f}x"
    )
    print(
        f"fast path vs teaching path: {med['ours (fast path)'] / med['ours (teaching, weights)']:.2f}x "
        f"(must be <= 1.0x)"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer repeats and T <= 512 (a smoke run)")
    args = p.parse_args()
    device = str(default_device())
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={device}")
    lengths = (128, 512) if args.quick else (128, 512, 2048)
    repeats = 3 if args.quick else 9
    bench_sdpa(lengths, device, repeats)
    bench_mha(device, repeats * 3)


if __name__ == "__main__":
    main()
