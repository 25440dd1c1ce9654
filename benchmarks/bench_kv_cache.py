"""Decoding speed: no cache vs concatenating cache vs static cache vs Hugging Face GPT-2 generate.

Run: .venv/bin/python benchmarks/bench_kv_cache.py [--quick] [--threads N] [--repeats R] [--shape book|gpt2|gpt2-small]

Greedy decoding with random weights (speed does not depend on training), on three shapes: the book's GPT (the
committed checkpoint's config), a GPT-2-shaped 6-layer d_model 384 model (prompt 64), and GPT-2 small itself
(12 layers, d_model 768, 12 heads, vocab 50257, tied embeddings; prompt 4, 200 new tokens). Every label is built
from the model's config. Hugging Face ``GPT2LMHeadModel`` gets a ``GPT2Config`` of the same shape (no download) and
a copy of our weights, so both compute the same thing; the benchmark says whether their greedy tokens agree.
All variants of one length run round-robin in the same process (interleaved medians), so the ratios
are measured under the same load. Tokens/s counts new tokens over the whole call (prefill included).
"static cache" is ``generate`` called as a user calls it (default arguments, the same model every call): every step
runs the model's own forward, and on a CPU the first call packs the weights in place (``weight_layout.
pack_for_decoding``: the (in, out) order the CPU's matrix-vector products read fastest, once per model, as serving
engines repack weights at load time). "static, Linear layout" is the same on a copy whose weights keep nn.Linear's
(out, in) order, to show what the layout is worth; "frozen fused" is the hand-written decoding step the library had
before it decoded through the model's forward (``_frozen_fused_decode.py``, kept here as a baseline only), with its
(in, out) weight copies built once. At GPT-2 small two paths read fewer bytes per token: "bf16 static" (the model
in bfloat16) and "int8 dynamic" (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantized
on the fly).
On a GPU (if present) the same code runs without packing (no CUDA graphs or torch.compile).

The limit: a new token must read every weight once plus the cached keys and values. Decoding reads them with
matrix-vector products, so the limit is measured the same way, interleaved with the variants: one fp32 matrix of
exactly the bytes a token reads (weights + the cache at the mean length), multiplied by a vector, in both layouts;
the faster one is the "weights-only limit" (tokens/s = 1 / its time). A tensor copy's bandwidth is printed too
(it is not what a matrix-vector product reaches). ``--profile`` adds a per-operator profile of one fp32 decoding
step at GPT-2 small: the time in matrix products against the rest.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import interleaved_medians, print_table, synchronize  # noqa: E402

from transformer_lib import GPT, GPTConfig, default_device  # noqa: E402
from transformer_lib.experiments.batched_decoding import decode_step_cost  # noqa: E402
from transformer_lib.experiments.hf_reference import hf_gpt2  # noqa: E402
from _frozen_fused_decode import frozen_generate, matvec_copies  # noqa: E402
from transformer_lib.serving.generation import generate  # noqa: E402
from transformer_lib.serving.weight_layout import unpack_weights  # noqa: E402
from transformer_lib.book_models.checkpoints import checkpoint_info  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VARIANTS = (  # the table's columns; a shape times its own subset
    "no cache",
    "concat cache",
    "static cache",
    "static, Linear layout",
    "frozen fused",
    "HF cached",
    "HF no cache",
    "bf16 static",
    "int8 dynamic",
)
FEWER_BYTES = ("bf16 static", "int8 dynamic")  # paths that read fewer bytes per token than fp32


@dataclass
class Shape:
    """One benchmarked model shape: its config, prompt length, new-token counts and the variants timed."""

    name: str
    cfg: GPTConfig
    prompt: int
    lengths: tuple[int, ...]
    quick_lengths: tuple[int, ...]
    variants: tuple[str, ...] = tuple(v for v in VARIANTS if v != "frozen fused")  # the baseline: GPT-2 small only

    def label(self) -> str:
        """Built from the config, so it cannot go stale."""
        c = self.cfg
        kv = "" if c.n_kv_heads in (None, c.n_heads) else f", {c.n_kv_heads} kv heads"
        return (
            f"{self.name} ({c.n_layers}L, d{c.d_model}, {c.n_heads} heads{kv}, vocab {c.vocab_size}, "
            f"ctx {c.block_size}, {c.positional} positions)"
        )


def book_config() -> GPTConfig:
    """The committed Shakespeare GPT's config (read from its json, not its weights)."""
    return GPTConfig(**checkpoint_info("shakespeare_gpt")["model_config"])


SHAPES = {  # --shape name -> Shape
    "book": Shape("book GPT", book_config(), 64, (64,), (64,)),
    "gpt2": Shape(
        "GPT-2-shaped",
        GPTConfig(vocab_size=256, block_size=1024, n_layers=6, n_heads=6, d_model=384),
        64,
        (64, 256, 512),
        (64,),
    ),
    # the target shape: GPT-2 small, prompt 4, 200 new tokens; recomputation would take minutes
    "gpt2-small": Shape(
        "GPT-2 small",
        GPTConfig(vocab_size=50257, block_size=1024, n_layers=12, n_heads=12, d_model=768),
        4,
        (200,),
        (16,),
        ("concat cache", "static cache", "static, Linear layout", "frozen fused", "HF cached", *FEWER_BYTES),
    ),
}


def copy_bandwidth(device, n_bytes: int = 256 * 2**20) -> float:
    """Bytes moved per second (read + write) by a large tensor copy."""
    src = torch.empty(n_bytes // 4, device=device)
    dst = torch.empty_like(src)
    t = interleaved_medians({"copy": lambda: dst.copy_(src)}, repeats=7, device=device)["copy"]
    return 2 * n_bytes / t


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
    return (
        {name: statistics.median(ts) for name, ts in wall.items()},
        {name: statistics.median(ts) for name, ts in cpu.items()},
    )


def bytes_per_token(model: GPT, prompt: int, n_new: int) -> int:
    """Bytes one new token reads: every weight matrix once (the tied head once) + the K and V at the average cache
    length, in the model's dtype (``experiments.batched_decoding.decode_step_cost``, chapter 07's count)."""
    cost = decode_step_cost(model.cfg, 1, prompt + n_new // 2, model.tok_emb.weight.element_size())
    return cost["weight_bytes"] + cost["kv_bytes"]


def matvec_limit_calls(n_bytes: int, d_in: int, device) -> dict:
    """Two zero-argument calls that each stream one fp32 matrix of ``n_bytes`` through a matrix-vector product,
    ``x W`` with ``W`` stored ``(in, out)`` and ``W x`` with ``W`` stored ``(out, in)``: one call = one token's
    reads."""
    out = n_bytes // 4 // d_in
    g = torch.Generator(device="cpu").manual_seed(0)
    w_in_out = torch.randn(d_in, out, generator=g).to(device)  # (in, out)
    w_out_in = w_in_out.t().contiguous()  # (out, in)
    x = torch.randn(1, d_in, generator=g).to(device)  # (1, in)
    return {
        "limit: x W, (in, out)": lambda: torch.mm(x, w_in_out),
        "limit: W x, (out, in)": lambda: torch.mv(w_out_in, x[0]),
    }


def decode_profile(model: GPT, prompt: torch.Tensor, steps: int = 20) -> None:
    """Print where one fp32 decoding step's time goes: matrix products (mm/addmm) against everything else."""
    from torch.profiler import ProfilerActivity, profile
    from transformer_lib.serving.decoding import decode_step
    from transformer_lib.serving.kv_cache import StaticCache

    with torch.inference_mode():
        cache = StaticCache.for_model(model, 1, prompt.shape[1] + steps + 6)
        model(prompt, cache=cache)
        token = prompt[:, -1:]
        for _ in range(5):
            decode_step(model, token, cache)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                decode_step(model, token, cache)
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows) / steps / 1e3  # ms per step
    print(
        f"profile of one fp32 decoding step (static cache, packed weights; {steps} steps): {total:.2f} ms per "
        "step (profiler overhead included)"
    )
    print_table(
        ["operator", "calls/step", "ms/step", "share"],
        [
            [
                e.key,
                f"{e.count / steps:.0f}",
                f"{e.self_cpu_time_total / steps / 1e3:.2f}",
                f"{100 * e.self_cpu_time_total / steps / 1e3 / total:.0f}%",
            ]
            for e in rows[:8]
        ],
    )


def linear_layout_copy(model: GPT) -> GPT:
    """A copy of ``model`` whose weight matrices are stored as ``nn.Linear`` makes them: (out, in), row-major."""
    other = copy.deepcopy(model)
    unpack_weights(other)
    return other


def ratio(a: dict, b: dict, x: str, y: str) -> str:
    """``a[x] / b[y]`` as "1.23x", or "-" when a variant was not timed for this shape."""
    return f"{a[x] / b[y]:.2f}x" if x in a and y in b else "-"


def int8_dynamic(model: GPT) -> GPT:
    """A copy of ``model`` with int8 weights (``quantize_dynamic``, deprecated in torch 2.13 but present and fast)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notice, printed once per call
        return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)


def make_variants(shape: Shape, model: GPT, hf, prompt: torch.Tensor, device) -> dict:
    """name -> (n -> a zero-argument call generating n tokens), for the variants this shape times."""
    ones = torch.ones_like(prompt)
    extra = {"linear": linear_layout_copy(model)}
    if "frozen fused" in shape.variants:
        t0 = time.perf_counter()
        extra["copies"] = matvec_copies(extra["linear"])
        print(f"frozen baseline's (in, out) weight copies, once after loading: {time.perf_counter() - t0:.2f} s")
    if "bf16 static" in shape.variants:
        extra["bf16"] = copy.deepcopy(model).to(torch.bfloat16)
    if "int8 dynamic" in shape.variants and device.type == "cpu":
        extra["int8"] = int8_dynamic(model)
    hf_kw = dict(attention_mask=ones, do_sample=False)
    variants = {
        "no cache": lambda n: lambda: generate(model, prompt, n, use_cache=False),
        "concat cache": lambda n: lambda: generate(model, prompt, n, cache_implementation="dynamic"),
        "static cache": lambda n: lambda: generate(model, prompt, n),  # as a user calls it
        # the same forward with the weights in nn.Linear's (out, in) order: what the layout is worth
        "static, Linear layout": lambda n: lambda: generate(extra["linear"], prompt, n, pack_weights=False),
        "frozen fused": lambda n: lambda: frozen_generate(extra["linear"], prompt, n, extra["copies"]),
        "HF cached": lambda n: lambda: hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, use_cache=True, **hf_kw),
        "HF no cache": lambda n: (
            lambda: hf.generate(prompt, max_new_tokens=n, min_new_tokens=n, use_cache=False, **hf_kw)
        ),
        # bf16 decodes faster in nn.Linear's (out, in) layout here (oneDNN): pack_for_decoding packs fp32 only
        "bf16 static": lambda n: lambda: generate(extra["bf16"], prompt, n),
        "int8 dynamic": lambda n: lambda: generate(extra["int8"], prompt, n),
    }
    return {
        k: variants[k]
        for k in shape.variants
        if (hf is not None or not k.startswith("HF"))
        and (k != "int8 dynamic" or "int8" in extra)
        and (k != "frozen fused" or "copies" in extra)
    }


def bench_shape(shape: Shape, lengths, device, repeats: int, bandwidth: float, profile: bool = False) -> list:
    cfg, P = shape.cfg, shape.prompt
    torch.manual_seed(0)
    model = GPT(cfg).to(device).eval()
    hf = hf_gpt2(model, device) if cfg.positional == "learned" else None
    prompt = torch.randint(0, cfg.vocab_size, (1, P), device=device)
    hf_params = "" if hf is None else f" (HF: {hf.num_parameters() / 1e6:.2f}M)"
    print(
        f"\n## {shape.label()}: {model.num_params() / 1e6:.2f}M parameters{hf_params}, prompt {P}, greedy, fp32, "
        f"{device}"
    )
    variants = make_variants(shape, model, hf, prompt, device)
    speed_rows, ratio_rows = [], []
    with torch.inference_mode():
        warm = {}
        for name, make in variants.items():  # warm-up; every variant must generate exactly the tokens asked for
            warm[name] = out = make(16)()
            if out.shape != (1, P + 16):
                raise RuntimeError(f"{name} returned shape {tuple(out.shape)}, expected (1, {P + 16})")
        if hf is not None:
            print(
                f"same greedy tokens as HF on the same weights (16 new): "
                f"{torch.equal(warm['static cache'], warm['HF cached'])}"
            )
        for n in lengths:
            slow = 1 if n >= 512 else max(1, repeats // 2) if n >= 256 else repeats  # recomputation is slow
            reps = {k: slow if "no cache" in k else repeats for k in variants}
            per_token = bytes_per_token(model, P, n)
            limits = matvec_limit_calls(per_token, cfg.d_model, device)  # one call = one token's reads
            fns = {**{k: make(n) for k, make in variants.items()}, **limits}
            med, med_cpu = uneven_interleaved_medians(fns, {**reps, **{k: repeats for k in limits}}, device)
            limit = 1 / min(med[k] for k in limits)  # tokens/s: the faster layout
            tps = {k: n / med[k] for k in variants}
            cpu_tps = {k: n / med_cpu[k] for k in variants}
            speed_rows.append([n] + [f"{tps[k]:.1f}" if k in tps else "-" for k in VARIANTS] + [f"{limit:.1f}"])
            ratio_rows.append(
                [
                    n,
                    ratio(tps, tps, "static cache", "no cache"),
                    ratio(tps, tps, "static cache", "HF cached"),
                    ratio(cpu_tps, cpu_tps, "static cache", "HF cached"),
                    ratio(tps, tps, "concat cache", "HF cached"),
                    ratio(tps, tps, "static cache", "static, Linear layout"),
                    ratio(tps, tps, "static cache", "frozen fused"),
                    f"{per_token / 1e6:.1f}",
                    f"{bandwidth / per_token:.0f}",
                    f"{limit:.1f}",
                    *[
                        f"{100 * tps[k] / limit:.0f}%" if k in tps else "-"
                        for k in ("static cache", "frozen fused", "concat cache", "HF cached", *FEWER_BYTES)
                    ],
                ]
            )
            print(
                "limit: "
                + ", ".join(f"{k[7:]} {1 / med[k]:.1f} tok/s ({per_token / med[k] / 1e9:.1f} GB/s)" for k in limits)
            )
    print(
        f"tokens/s (new tokens / whole call, prefill included; median of {repeats} interleaved runs; last column: "
        "the weights-only limit, one weight-sized fp32 matrix-vector product per token):"
    )
    print_table(["new", *VARIANTS, "limit"], speed_rows)
    print(
        "ratios (same run); the copy roofline (copy bandwidth / bytes per token) and the matrix-vector limit; "
        "each variant's tok/s as a share of that limit:"
    )
    print_table(
        [
            "new",
            "static/no cache",
            "static/HF",
            "(CPU time)",
            "concat/HF",
            "layout gain",
            "static/frozen",
            "MB/token",
            "copy roof",
            "limit tok/s",
            "static % limit",
            "frozen % limit",
            "concat % limit",
            "HF % limit",
            *[f"{k} % limit" for k in FEWER_BYTES],
        ],
        ratio_rows,
    )
    if profile and device.type == "cpu":
        decode_profile(model, prompt)
    return ratio_rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="few new tokens, 3 repeats (smoke run)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per variant (fewer for recomputation)")
    p.add_argument("--shape", choices=["all", *SHAPES], default="all", help="benchmark one shape only")
    p.add_argument("--profile", action="store_true", help="per-operator profile of an fp32 step at GPT-2 small")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = default_device()
    bw = copy_bandwidth(device)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={device}, "
        f"copy bandwidth {bw / 1e9:.1f} GB/s, load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    if device.type == "cpu" and torch.get_num_threads() > 1 and load > (os.cpu_count() or 1):
        print(
            "note: the CPUs are oversubscribed; multi-threaded kernels then stall waiting for each other "
            "(seen here: 10x slower decoding with 2 threads). Compare with --threads 1."
        )
    repeats = 3 if args.quick else args.repeats
    for key, shape in SHAPES.items():
        if args.shape not in ("all", key):
            continue
        lengths = shape.quick_lengths if args.quick else shape.lengths
        bench_shape(
            shape,
            [n for n in lengths if shape.prompt + n <= shape.cfg.block_size],
            device,
            repeats,
            bw,
            profile=args.profile and key == "gpt2-small",
        )
    print(
        "\nTargets: static >= 10x no cache at 256 new tokens; at GPT-2 small (prompt 4, 200 new tokens) static "
        "(generate through the model's forward) >= the frozen fused baseline, >= 85% of the weights-only limit and "
        ">= 1.2x HF cached, and a fewer-bytes path (bf16 or int8) above 100% of the fp32 limit."
    )


if __name__ == "__main__":
    main()
