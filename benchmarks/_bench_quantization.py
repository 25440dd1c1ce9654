"""Quantization part of ``bench_compression.py``: size, quality and decoding speed of quantized GPTs.

``quantization_tables(model, tokenizer, val_data, device)`` prints two tables and returns them as strings:

1. the given (trained) GPT in each format: bytes of the saved file, validation loss and perplexity, top-1
   next-token agreement with fp32 on the same inputs, decode tokens/s and the ratio to fp32, on 1 CPU thread and on
   the current count (on a busy 2-core machine a second thread often waits for a core: compare both);
2. decode speed of a GPT-2-shaped model (6 layers, d_model 384, random weights: speed does not depend on training)
   in the same formats but int4, ``rounds`` times per thread count to show how stable the ratios are.

Formats: the library's ``quantize_model`` (int8 per-channel weight-only, int8 weights + dynamic per-token int8
activations "W8A8", int4 group-wise weight-only), bf16, and the ecosystem: PyTorch's ``quantize_dynamic``
(``torch.ao.quantization``, deprecated: its DeprecationWarning/UserWarnings are silenced here only) and torchao's
int8 weight-only (only if ``torchao`` is installed). Their file sizes come from ``torch.save`` (safetensors cannot
hold their packed tensors); ours from the safetensors file ``train.save_weights`` writes (``torch.save`` alongside).
Times are interleaved medians in one run (``_timing.interleaved_medians``); compare ratios, not absolute numbers.

``algorithm_tables(model, tokenizer, val_data, device, quick)`` (called by ``quantization_tables``) prints four
more: round-to-nearest vs GPTQ vs AWQ at int4 for several group sizes on the trained GPT (perplexity on held-out
plays, calibration on training plays) and on MiniLM (embedding agreement on held-out lines, calibration on lines of
other plays); SmoothQuant's W8A8 agreement on MiniLM by alpha; NF4 against int4 on real and N(0, 1) weights.

Run alone: ``.venv/bin/python benchmarks/_bench_quantization.py [--quick]`` (the trained Shakespeare GPT).
"""

from __future__ import annotations

import contextlib
import copy
import io
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import format_table, interleaved_medians  # noqa: E402

from transformer_lib import GPT, GPTConfig  # noqa: E402
from transformer_lib.experiments import quant_methods as QM  # noqa: E402
from transformer_lib.experiments.threads import torch_threads  # noqa: E402
from transformer_lib.serving.generation import generate  # noqa: E402
from transformer_lib.quant.storage import saved_size  # noqa: E402
from transformer_lib.quant import lm_quality, quantize_model  # noqa: E402

# torchao 0.18 touches TypedStorage when its tensors are copied or saved (a torch deprecation, not our concern)
warnings.filterwarnings("ignore", message="TypedStorage is deprecated")

PROMPT = "ROMEO:\n"
NEW_TOKENS = 96
GPT2_SHAPE = GPTConfig(vocab_size=256, block_size=1024, n_layers=6, n_heads=6, d_model=384)


def torch_save_size(model: torch.nn.Module) -> int:
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return buf.getbuffer().nbytes


def ecosystem_variants(model: torch.nn.Module, device) -> dict:
    """``{name: model}`` for PyTorch's quantize_dynamic (CPU only) and torchao int8 weight-only, where available."""
    out = {}
    if torch.device(device).type == "cpu":
        with warnings.catch_warnings():  # deprecated API: keep its warnings out of the output
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            out["torch quantize_dynamic int8"] = quantize_dynamic(
                copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8
            )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.quantization import Int8WeightOnlyConfig, quantize_

            m = copy.deepcopy(model)
            quantize_(m, Int8WeightOnlyConfig())
            out["torchao int8 weight-only"] = m
    except ImportError:
        pass
    return out


def variants(model: torch.nn.Module, device) -> dict:
    """The formats compared, each a fresh copy of ``model``: ``{name: model}``."""
    out = {
        "fp32": model,
        "bf16": copy.deepcopy(model).to(torch.bfloat16),
        "int8 per-channel": quantize_model(copy.deepcopy(model), 8),
        "int8 W8A8 (per-token act.)": quantize_model(copy.deepcopy(model), 8, act_bits=8),
        "int4 g128": quantize_model(copy.deepcopy(model), 4, 128),
        "int4 g32": quantize_model(copy.deepcopy(model), 4, 32),
    }
    out.update(ecosystem_variants(model, device))
    return out


def decode_speeds(models: dict, prompt: torch.Tensor, n_new: int, device, repeats: int) -> dict:
    """``{name: decode tokens/s}``, interleaved medians over ``models`` (greedy, static KV cache)."""

    def fn(m):
        def run():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                generate(m, prompt, n_new)

        return run

    med = interleaved_medians({k: fn(m) for k, m in models.items()}, repeats=repeats, warmup=1, device=device)
    return {k: n_new / v for k, v in med.items()}


def method_rows(results: dict, higher_is_better: bool) -> list[list[str]]:
    """Rows of a ``compare_methods`` result: group, method, score, change against RTN at that group, seconds."""
    rows = []
    for r in results["rows"]:
        rtn = QM.score_of(results, "rtn", r["group_size"])
        gain = (r["score"] - rtn) if higher_is_better else (rtn - r["score"])
        rows.append(
            [
                "per-channel" if r["group_size"] is None else f"g{r['group_size']}",
                r["method"],
                f"{r['score']:.4f}",
                "-" if r["method"] == "rtn" else f"{gain:+.4f}",
                f"{r['seconds']:.2f}",
            ]
        )
    return rows


def algorithm_tables(model, tokenizer, val_data, device, quick: bool = False) -> list[str]:
    """Print and return the four algorithm tables (RTN/GPTQ/AWQ on the GPT and MiniLM, SmoothQuant, NF4 vs int4).
    ``quick``: fewer batches, lines and group sizes (a smoke run)."""
    from transformer_lib.models.pretrained import load_minilm, sentence_embeddings

    device = torch.device(device)
    groups = (None, 32) if quick else (None, 128, 32)
    model = copy.deepcopy(model).to(device).eval()
    val_data = [tuple(t.to(device) for t in b) for b in val_data]
    calib = QM.gpt_calibration_batches(tokenizer, model.cfg.block_size, n_batches=2 if quick else 8)
    gpt = QM.compare_methods(model, calib, lambda m: QM.gpt_perplexity(m, val_data), group_sizes=groups)
    n_tok = sum(y.numel() for _, y in val_data)
    tables = [
        format_table(
            f"Trained GPT at int4: perplexity on {n_tok:,} held-out tokens (float32: {gpt['float']:.4f}); calibration "
            f"{sum(x.numel() for x, _ in calib):,} training tokens; gain = RTN's perplexity - the method's; seconds to "
            f"quantize",
            ["scales", "method", "perplexity", "gain vs RTN", "seconds"],
            method_rows(gpt, False),
        )
    ]

    minilm, mtok = load_minilm(device)
    cal_lines = QM.shakespeare_lines("train", 16 if quick else 64, seed=0)
    eval_lines = QM.shakespeare_lines("val", 16 if quick else 256, seed=1)
    cal_batches = QM.sentence_batches(mtok, cal_lines)
    ref = sentence_embeddings(minilm, mtok, eval_lines)
    mini = QM.compare_methods(
        minilm, cal_batches, lambda m: QM.embedding_agreement(m, mtok, eval_lines, ref), group_sizes=groups
    )
    tables.append(
        format_table(
            f"MiniLM at int4: embedding agreement (mean cosine with float32) on {len(eval_lines)} held-out lines; "
            f"calibration {len(cal_lines)} lines of other plays; gain = the method's agreement - RTN's",
            ["scales", "method", "agreement", "gain vs RTN", "seconds"],
            method_rows(mini, True),
        )
    )

    alphas = (0.5,) if quick else (0.25, 0.5, 0.75, 0.9)
    sq = QM.smoothquant_agreement(minilm, mtok, cal_batches, eval_lines, alphas)
    x = QM.layer_inputs(minilm, cal_batches, "layers.0.ffn.up")
    mig = {a: QM.outlier_migration(x, minilm.get_submodule("layers.0.ffn.up").weight, a) for a in alphas}
    rows = [
        ["int8 weights only", "-", f"{sq['int8 weights']:.5f}", "-", "-", "-"],
        [
            "W8A8, no smoothing",
            "-",
            f"{sq['W8A8']:.5f}",
            f"{mig[alphas[0]]['x_max_before']:.2f}",
            f"{mig[alphas[0]]['w_max_before']:.3f}",
            f"{100 * mig[alphas[0]]['error_before']:.2f}%",
        ],
    ]
    rows += [
        [
            "W8A8 + SmoothQuant",
            f"{a}",
            f"{sq['smooth'][a]:.5f}",
            f"{mig[a]['x_max_after']:.2f}",
            f"{mig[a]['w_max_after']:.3f}",
            f"{100 * mig[a]['error_after']:.2f}%",
        ]
        for a in alphas
    ]
    tables.append(
        format_table(
            f"MiniLM W8A8 (per-token int8 activations): agreement on the same lines; layers.0.ffn.up, outlier channel "
            f"{mig[alphas[0]]['channel']}: its largest |x| and weight column's largest |w|, and the layer's W8A8 "
            f"output error",
            ["model", "alpha", "agreement", "max |x_j|", "max |w_j|", "ffn.up error"],
            rows,
        )
    )

    weights = {
        "trained GPT": QM.linear_weights(model),
        "MiniLM": QM.linear_weights(minilm),
        "N(0, 1)": torch.randn(2**20, generator=torch.Generator().manual_seed(0)),
    }
    nf4 = QM.nf4_vs_int4(weights)
    rows = [
        [
            name,
            f"{w.numel():,}",
            f"{r['nf4 rel']:.5f}",
            f"{r['int4_zero_point rel']:.5f}",
            f"{r['int4_absmax rel']:.5f}",
            f"{r['nf4'] / r['int4_zero_point']:.3f}",
        ]
        for (name, w), r in zip(weights.items(), nf4.values())
    ]
    tables.append(
        format_table(
            "NF4 vs int4, blocks of 64 weights: round-trip MSE / mean square of the weights",
            ["weights", "values", "NF4", "int4 zero-point", "int4 absmax", "NF4 / zero-point"],
            rows,
        )
    )
    for t in tables:
        print(t + "\n", flush=True)
    return tables


def quantization_tables(
    model,
    tokenizer,
    val_data,
    device,
    repeats: int = 5,
    rounds: int = 2,
    thread_counts: tuple[int, ...] | None = None,
    quick: bool = False,
) -> list[str]:
    """Print and return the two tables, then ``algorithm_tables``'s four. ``model``: a trained ``GPT`` (not
    modified: every format is a copy); ``val_data``: a list of ``(x, y)`` batches, each ``(B, T)``.
    ``thread_counts``: CPU threads to time decoding with (default: 1 and the current count); one token at a time is
    little work to share between threads."""
    device = torch.device(device)
    if thread_counts is None:
        n = torch.get_num_threads()
        thread_counts = tuple(sorted({1, n})) if device.type == "cpu" else (n,)
    model = copy.deepcopy(model).to(device).eval()
    val_data = [tuple(t.to(device) for t in b) for b in val_data]
    models = variants(model, device)
    ref = lm_quality(model, val_data)
    prompt = torch.tensor([tokenizer.encode(PROMPT)], device=device)
    n_new = min(NEW_TOKENS, model.cfg.block_size - prompt.shape[1])
    speed = {}
    for n in thread_counts:
        with torch_threads(n):
            speed[n] = decode_speeds(models, prompt, n_new, device, repeats)
    fp32_size = saved_size(model)
    rows = []
    for name, m in models.items():
        try:
            size = saved_size(m)
        except Exception:  # packed tensor subclasses: safetensors cannot hold them
            size = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q = lm_quality(m, val_data, ref["top1"])
        rows.append(
            [
                name,
                "-" if size is None else f"{size:,}",
                "-" if size is None else f"{size / fp32_size:.3f}",
                f"{torch_save_size(m):,}",
                f"{q['loss']:.4f}",
                f"{q['perplexity']:.3f}",
                f"{100 * (q['perplexity'] / ref['perplexity'] - 1):+.2f}%",
                f"{100 * q['agreement']:.2f}%",
            ]
            + [f"{speed[n][name]:.0f} ({speed[n][name] / speed[n]['fp32']:.2f}x)" for n in thread_counts]
        )
    n_tok = sum(y.numel() for _, y in val_data)
    tables = [
        format_table(
            f"Trained GPT ({model.num_params() / 1e6:.2f}M parameters), {n_tok:,} validation tokens; decode {n_new} "
            f"tokens greedily from {PROMPT!r}, {device}: tok/s (x fp32), median of {repeats}",
            [
                "format",
                "safetensors B",
                "x fp32",
                "torch.save B",
                "loss/token",
                "perplexity",
                "ppl vs fp32",
                "top-1 agree",
            ]
            + [f"decode, {n} thread{'s' * (n > 1)}" for n in thread_counts],
            rows,
        )
    ]

    torch.manual_seed(0)
    big = GPT(GPT2_SHAPE).to(device).eval()
    big_models = {k: m for k, m in variants(big, device).items() if not k.startswith("int4")}
    big_prompt = torch.randint(0, GPT2_SHAPE.vocab_size, (1, 32), device=device)
    columns, results = [], []
    for n in thread_counts:
        with torch_threads(n):
            for r in range(rounds):
                columns.append(f"{n} thr., round {r + 1}")
                results.append(decode_speeds(big_models, big_prompt, NEW_TOKENS, device, repeats))
    rows = [[name] + [f"{r[name]:.0f} ({r[name] / r['fp32']:.2f}x)" for r in results] for name in big_models]
    tables.append(
        format_table(
            f"Decode speed, GPT-2-shaped model (6L, d384, {big.num_params() / 1e6:.1f}M parameters, "
            f"{saved_size(big) / 1e6:.1f} MB in fp32, random weights), prompt 32, {NEW_TOKENS} new tokens, {device}: "
            f"tok/s (x fp32), median of {repeats}. int4 left out (about 0.1x: unpacking dominates)",
            ["format"] + columns,
            rows,
        )
    )
    for t in tables:
        print(t + "\n", flush=True)
    return tables + algorithm_tables(model, tokenizer, val_data, device, quick)


def main() -> None:
    import argparse

    from transformer_lib.utils.device import default_device
    from transformer_lib.book_models.checkpoints import load_shakespeare_gpt
    from transformer_lib.book_models.metrics import shakespeare_val_batches

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="fewer batches and repeats (smoke run)")
    args = p.parse_args()
    device = default_device()
    model, tok = load_shakespeare_gpt(device)
    batches = shakespeare_val_batches(model.cfg.block_size)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, device={device}\n")
    quantization_tables(
        model,
        tok,
        batches[:4] if args.quick else batches,
        device,
        repeats=2 if args.quick else 5,
        rounds=1 if args.quick else 2,
        quick=args.quick,
    )


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
