"""Decoding speed: no cache vs concatenating cache vs static cache vs Hugging Face GPT-2 generate.

Run: .venv/bin/python benchmarks/bench_kv_cache.py [--quick] [--threads N] [--repeats R] [--shape book|gpt2|gpt2-small]

Greedy decoding with random weights (speed does not depend on training), on three shapes: the book's GPT (the
committed checkpoint's config), a GPT-2-shaped 6-layer d_model 384 model (prompt 64), and GPT-2 small itself
(12 layers, d_model 768, 12 heads, vocab 50257, tied embeddings; prompt 4, 200 new tokens). Every label is built
from the model's config. Hugging Face ``GPT2LMHeadModel`` gets a ``GPT2Config`` of the same shape (no download) and
a copy of our weights, so both compute the same thing; the benchmark says whether their greedy tokens agree.
All variants of one length run round-robin in the same process (interleaved medians), so the ratios
are measured under the same load. Tokens/s counts new tokens over the whole call (prefill included).
"static, Linear layout" is the static cache without ``generate.matvec_weights`` (weights read as nn.Linear
stores them), to show what that layout is worth. On a GPU (if present) the same code runs
with ``transpose_weights`` off (no CUDA graphs or torch.compile).

Roofline: a new token must read every weight once plus the cached keys and values, so
``tokens/s <= bandwidth / bytes_per_token``; the bandwidth is a large tensor copy's bytes moved per second.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import interleaved_medians, print_table, synchronize  # noqa: E402

from transformer_lib import GPT, GPTConfig, default_device  # noqa: E402
from transformer_lib.generate import generate  # noqa: E402
from transformer_lib.kv_cache import kv_cache_bytes  # noqa: E402
from transformer_lib.book_models import checkpoint_info  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VARIANTS = ("no cache", "concat cache", "static cache", "static, Linear layout", "HF cached", "HF no cache")


@dataclass
class Shape:
    """One benchmarked model shape: its config, prompt length, new-token counts and the variants timed."""
    name: str
    cfg: GPTConfig
    prompt: int
    lengths: tuple[int, ...]
    quick_lengths: tuple[int, ...]
    variants: tuple[str, ...] = VARIANTS

    def label(self) -> str:
        """Built from the config, so it cannot go stale."""
        c = self.cfg
        kv = "" if c.n_kv_heads in (None, c.n_heads) else f", {c.n_kv_heads} kv heads"
        return (f"{self.name} ({c.n_layers}L, d{c.d_model}, {c.n_heads} heads{kv}, vocab {c.vocab_size}, "
                f"ctx {c.block_size}, {c.positional} positions)")


def book_config() -> GPTConfig:
    """The committed Shakespeare GPT's config (read from its json, not its weights)."""
    return GPTConfig(**checkpoint_info("shakespeare_gpt")["model_config"])


SHAPES = {  # --shape name -> Shape
    "book": Shape("book GPT", book_config(), 64, (64,), (64,)),
    "gpt2": Shape("GPT-2-shaped", GPTConfig(vocab_size=256, block_size=1024, n_layers=6, n_heads=6, d_model=384),
                  64, (64, 256, 512), (64,)),
    # the target shape: GPT-2 small, prompt 4, 200 new tokens; recomputation would take minutes
    "gpt2-small": Shape("GPT-2 small", GPTConfig(vocab_size=50257, block_size=1024, n_layers=12, n_heads=12,
                                                 d_model=768), 4, (200,), (16,),
                        ("concat cache", "static cache", "HF cached")),
}


def copy_bandwidth(device, n_bytes: int = 256 * 2**20) -> float:
    """Bytes moved per second (read + write) by a large tensor copy."""
    src = torch.empty(n_bytes // 4, device=device)
    dst = torch.empty_like(src)
    t = interleaved_medians({"copy": lambda: dst.copy_(src)}, repeats=7, device=device)["copy"]
    return 2 * n_bytes / t


@torch.no_grad()
def hf_model(model: GPT, device):
    """``GPT2LMHeadModel`` of ``model``'s shape holding a copy of its weights (HF's Conv1D stores (in, out))."""
    from transformers import GPT2Config, GPT2LMHeadModel
    c = model.cfg
    if c.positional != "learned" or c.n_kv_heads not in (None, c.n_heads):
        raise ValueError(f"GPT-2 has learned positions and one kv head per head, got positional={c.positional!r}, "
                         f"n_kv_heads={c.n_kv_heads}")
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=c.vocab_size, n_positions=c.block_size, n_embd=c.d_model,
                                    n_layer=c.n_layers, n_head=c.n_heads, n_inner=c.d_ff, activation_function="gelu",
                                    layer_norm_epsilon=1e-5, bos_token_id=None, eos_token_id=None, pad_token_id=0,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    ours = {"transformer.wte.weight": model.tok_emb.weight, "transformer.wpe.weight": model.pos.weight,
            "transformer.ln_f.weight": model.norm.weight, "transformer.ln_f.bias": model.norm.bias}
    for i, b in enumerate(model.blocks):
        h = f"transformer.h.{i}."
        for hf_name, lin in (("attn.c_attn", b.self_attn.qkv), ("attn.c_proj", b.self_attn.out),
                             ("mlp.c_fc", b.ffn.up), ("mlp.c_proj", b.ffn.down)):
            ours[h + hf_name + ".weight"], ours[h + hf_name + ".bias"] = lin.weight.T, lin.bias
        for hf_name, norm in (("ln_1", b.res_self.norm), ("ln_2", b.res_ffn.norm)):
            ours[h + hf_name + ".weight"], ours[h + hf_name + ".bias"] = norm.weight, norm.bias
    for name, tensor in hf.state_dict().items():
        if name in ours:
            tensor.copy_(ours[name])
    return hf.to(device).eval()


def uneven_interleaved_medians(fns: dict, repeats: dict, device) -> tuple[dict, dict]:
    """Median seconds per call, wall clock and process CPU time; round r runs, in order, every function with
    ``repeats[name] > r``. Slow variants (recomputation at long lengths) get fewer rounds but still alternate.

    On a shared CPU the wall clock includes time other processes held the cores; CPU time mostly does not,
    so the two ratios bracket the truth (CPU time means nothing for GPU work).
    """
    wall, cpu = {name: [] for name in fns}, {name: [] for name in fns}
    for r in range(max(repeats.values())):
        for name, fn in fns.items():
            if r < repeats[name]:
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                synchronize(device)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    return ({name: statistics.median(ts) for name, ts in wall.items()},
            {name: statistics.median(ts) for name, ts in cpu.items()})


def roofline_tokens_per_s(model: GPT, prompt: int, n_new: int, bandwidth: float) -> tuple[float, float]:
    """``(tokens/s bound, MB read per token)``: all weights once + the K and V at the average cache length."""
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # tied lm_head counted once
    c = model.cfg
    cache = kv_cache_bytes(c.n_layers, c.n_kv_heads or c.n_heads, c.d_model // c.n_heads, prompt + n_new // 2,
                           bytes_per_element=4)
    per_token = weight_bytes + cache
    return bandwidth / per_token, per_token / 1e6


def ratio(a: dict, b: dict, x: str, y: str) -> str:
    """``a[x] / b[y]`` as "1.23x", or "-" when a variant was not timed for this shape."""
    return f"{a[x] / b[y]:.2f}x" if x in a and y in b else "-"


def bench_shape(shape: Shape, lengths, device, repeats: int, bandwidth: float) -> list:
    cfg, P = shape.cfg, shape.prompt
    torch.manual_seed(0)
    model = GPT(cfg).to(device).eval()
    hf = hf_model(model, device) if cfg.positional == "learned" else None
    names = [v for v in shape.variants if hf is not None or not v.startswith("HF")]
    prompt = torch.randint(0, cfg.vocab_size, (1, P), device=device)
    ones = torch.ones_like(prompt)
    hf_params = "" if hf is None else f" (HF: {hf.num_parameters() / 1e6:.2f}M)"
    print(f"\n## {shape.label()}: {model.num_params() / 1e6:.2f}M parameters{hf_params}, prompt {P}, greedy, fp32, "
          f"{device}")

    variants = {  # name -> (n -> a zero-argument call generating n tokens)
        "no cache": lambda n: lambda: generate(model, prompt, n, use_cache=False),
        "concat cache": lambda n: lambda: generate(model, prompt, n, cache="dynamic"),
        "static cache": lambda n: lambda: generate(model, prompt, n, cache="static"),
        # the same without the (in, out) weight copies of generate.matvec_weights: what the layout is worth
        "static, Linear layout": lambda n: lambda: generate(model, prompt, n, cache="static", transpose_weights=False),
        "HF cached": lambda n: lambda: hf.generate(prompt, attention_mask=ones, max_new_tokens=n, min_new_tokens=n,
                                                   do_sample=False, use_cache=True),
        "HF no cache": lambda n: lambda: hf.generate(prompt, attention_mask=ones, max_new_tokens=n,
                                                     min_new_tokens=n, do_sample=False, use_cache=False),
    }
    variants = {k: variants[k] for k in names}
    speed_rows, ratio_rows = [], []
    with torch.inference_mode():
        warm = {}
        for name, make in variants.items():  # warm-up; every variant must generate exactly the tokens asked for
            warm[name] = out = make(16)()
            if out.shape != (1, P + 16):
                raise RuntimeError(f"{name} returned shape {tuple(out.shape)}, expected (1, {P + 16})")
        if hf is not None:
            print(f"same greedy tokens as HF on the same weights (16 new): "
                  f"{torch.equal(warm['static cache'], warm['HF cached'])}")
        for n in lengths:
            slow = 1 if n >= 512 else max(1, repeats // 2) if n >= 256 else repeats  # recomputation is slow
            reps = {k: slow if "no cache" in k else repeats for k in variants}
            med, med_cpu = uneven_interleaved_medians({k: make(n) for k, make in variants.items()}, reps, device)
            tps = {k: n / v for k, v in med.items()}
            cpu_tps = {k: n / v for k, v in med_cpu.items()}
            roof, mb = roofline_tokens_per_s(model, P, n, bandwidth)
            best = max(tps["static cache"], tps["concat cache"])
            speed_rows.append([n] + [f"{tps[k]:.1f}" if k in tps else "-" for k in VARIANTS])
            ratio_rows.append([n, ratio(tps, tps, "static cache", "no cache"),
                               ratio(tps, tps, "static cache", "HF cached"),
                               ratio(cpu_tps, cpu_tps, "static cache", "HF cached"),
                               ratio(tps, tps, "concat cache", "HF cached"),
                               ratio(tps, tps, "static cache", "static, Linear layout"),
                               ratio(tps, tps, "HF cached", "HF no cache"), f"{mb:.1f}", f"{roof:.0f}",
                               f"{100 * best / roof:.0f}%",
                               f"{100 * tps['HF cached'] / roof:.0f}%" if "HF cached" in tps else "-"])
    print(f"tokens/s (new tokens / whole call, prefill included; median of {repeats} interleaved runs):")
    print_table(["new", *VARIANTS], speed_rows)
    print("ratios (same run) and the bandwidth roofline (weights + cache at the mean length, per token):")
    print_table(["new", "static/no cache", "static/HF cached", "(CPU time)", "concat/HF cached", "layout gain",
                 "HF cached/HF none",
                 "MB/token", "roofline tok/s", "ours % roof", "HF % roof"], ratio_rows)
    return ratio_rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="few new tokens, 3 repeats (smoke run)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per variant (fewer for recomputation)")
    p.add_argument("--shape", choices=["all", *SHAPES], default="all", help="benchmark one shape only")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = default_device()
    bw = copy_bandwidth(device)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={device}, "
          f"copy bandwidth {bw / 1e9:.1f} GB/s, load average {load:.1f} on {os.cpu_count()} CPUs")
    if device.type == "cpu" and torch.get_num_threads() > 1 and load > (os.cpu_count() or 1):
        print("note: the CPUs are oversubscribed; multi-threaded kernels then stall waiting for each other "
              "(seen here: 10x slower decoding with 2 threads). Compare with --threads 1.")
    repeats = 3 if args.quick else args.repeats
    for key, shape in SHAPES.items():
        if args.shape not in ("all", key):
            continue
        lengths = shape.quick_lengths if args.quick else shape.lengths
        bench_shape(shape, [n for n in lengths if shape.prompt + n <= shape.cfg.block_size], device, repeats, bw)
    print("\nTargets: static >= 10x no cache at 256 new tokens; ours >= 1.2x HF cached at equal shape; "
          "static >= 0.95x HF cached at GPT-2 small (prompt 4, 200 new tokens).")


if __name__ == "__main__":
    main()
