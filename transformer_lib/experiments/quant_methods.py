"""Chapter 09: which int4 rounding wins, measured. Round-to-nearest (RTN), GPTQ (Frantar et al. 2022) and AWQ
(Lin et al. 2024) at several group sizes on two real models, SmoothQuant (Xiao et al. 2023) for int8 activations
on MiniLM, and NF4 (Dettmers et al. 2023) against int4 on real weights.

Used in chapter 09.

* the book's trained GPT: perplexity on held-out plays, calibrated on windows of the training plays
  (``gpt_calibration_batches``);
* MiniLM (all-MiniLM-L6-v2): **embedding agreement**, the mean cosine between a quantized model's sentence embedding
  and the float model's, on lines of the held-out plays, calibrated on lines of the other plays
  (``shakespeare_lines``). 1 means the embeddings did not move.

``compare_methods`` runs every (method, group size) on a fresh copy of the model and records the score and the
seconds quantization took; the algorithms themselves live in ``quant/gptq.py``, ``quant/awq.py``,
``quant/smoothquant.py`` and ``quant/nf4.py``.

``method_study`` is chapter 09's whole comparison (both models, per channel and groups of 32, and GPTQ with half the
calibration): about half a minute of CPU, too long for the page, so ``python -m
transformer_lib.experiments.quant_methods`` writes it to ``checkpoints/quant_methods.json`` (``STUDY_PATH``), the
chapter reads it with ``committed_study``, and a slow test recomputes it and compares.
"""

from __future__ import annotations

import copy
import json
import platform
import time
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn as nn

from ..book_models.checkpoints import load_shakespeare_gpt
from ..book_models.metrics import shakespeare_val_batches
from ..utils.checks import check_choice, check_int, check_sequence, check_tensor
from ..data.corpus import get_batch, shakespeare_split
from ..models.pretrained import load_minilm, sentence_embeddings
from ..quant.awq import awq_quantize_model, awq_scales
from ..quant.calibration import calibration_inputs, lm_quality
from ..quant.gptq import gptq_quantize_model
from ..quant.int8_ops import quantize_per_token
from ..quant.linear import int8_kernel, linears_to_replace, quantize_model, rtn_weight
from ..quant.nf4 import compare_nf4_int4
from ..quant.smoothquant import smoothing_factors, smoothquant_model
from ..checkpoints import CHECKPOINT_DIR

METHODS = ("rtn", "gptq", "awq")
STUDY_PATH = CHECKPOINT_DIR / "quant_methods.json"


# ----------------------------------------------------------------------------- data
def shakespeare_lines(split: str, n: int, seed: int = 0, min_chars: int = 30, max_chars: int = 120) -> list[str]:
    """``n`` distinct verse or prose lines (``min_chars`` to ``max_chars`` characters) drawn at random (``seed``)
    from the training (``"train"``) or held-out (``"val"``) plays, in a fixed order."""
    check_choice("split", split, ("train", "val"))
    check_int("n", n, min=1)
    text = shakespeare_split()[split == "val"]
    lines = sorted({ln.strip() for ln in text.splitlines() if min_chars <= len(ln.strip()) <= max_chars})
    check_int("n", n, max=len(lines), note=f"at most the split's lines of {min_chars}-{max_chars} characters")
    order = torch.randperm(len(lines), generator=torch.Generator().manual_seed(seed))[:n]
    return [lines[i] for i in order.tolist()]


def gpt_calibration_batches(
    tokenizer, block_size: int, n_batches: int = 4, batch_size: int = 8, seed: int = 0, chars: int = 300_000
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random windows ``(x, y)``, each ``(batch_size, block_size)``, of a ``chars``-long stretch of the training
    plays starting at a seeded offset (encoding all of them takes seconds; calibration needs a few thousand
    tokens)."""
    train = shakespeare_split()[0]
    gen = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, max(1, len(train) - chars), (1,), generator=gen))
    ids = tokenizer.encode_tensor(train[start : start + chars])  # (N,)
    return [get_batch(ids, block_size, batch_size, gen) for _ in range(n_batches)]


def sentence_batches(tokenizer, sentences: Sequence[str]) -> list[torch.Tensor]:
    """One ``(1, T)`` id tensor per sentence: calibration inputs without padding (padding would enter the
    statistics, since ``calibration_inputs`` feeds ids alone)."""
    return [tokenizer.encode([s])["input_ids"] for s in sentences]


# ----------------------------------------------------------------------------- scores
def gpt_perplexity(model: nn.Module, batches) -> float:
    """``exp`` of the mean next-token cross-entropy (nats per token) over ``batches`` of ``(x, y)``."""
    return lm_quality(model, batches)["perplexity"]


@torch.no_grad()
def embedding_agreement(model: nn.Module, tokenizer, sentences: Sequence[str], reference: torch.Tensor) -> float:
    """Mean cosine between ``model``'s sentence embeddings of ``sentences`` and ``reference: (n, d)`` (the float
    model's, unit rows): 1.0 when nothing moved."""
    emb = sentence_embeddings(model, tokenizer, list(sentences))  # (n, d), unit rows
    check_tensor("reference", reference, tuple(emb.shape), note="(n, d): the float model's, one per sentence")
    return (emb * reference.to(emb)).sum(-1).mean().item()


# ----------------------------------------------------------------------------- RTN vs GPTQ vs AWQ
def quantize_copy(
    model: nn.Module,
    method: str,
    calib_batches,
    bits: int = 4,
    group_size: int | None = None,
    skip: tuple[str, ...] = (),
    awq_grid: int = 10,
) -> nn.Module:
    """A quantized copy of ``model`` (the original is untouched): ``method`` one of ``METHODS``; GPTQ and AWQ
    read the calibration batches, round-to-nearest ignores them. ``awq_grid``: alphas tried by AWQ."""
    check_choice("method", method, METHODS)
    m = copy.deepcopy(model)
    if method == "rtn":
        return quantize_model(m, bits, group_size, skip=skip)
    if method == "gptq":
        return gptq_quantize_model(m, calib_batches, bits, group_size, skip=skip)
    return awq_quantize_model(m, calib_batches, bits, group_size, awq_grid, skip=skip)


def awq_alphas(
    model: nn.Module, calib_batches, bits: int = 4, group_size: int | None = None, awq_grid: int = 10
) -> dict[str, float]:
    """The exponent ``alpha`` AWQ's search picks for each layer that ``quantize_copy(model, "awq", ...)`` scales,
    ``{name: alpha}`` (0: that layer is round-to-nearest); a layer tied to an embedding keeps ``s = 1`` and is left
    out. Searched on the inputs each layer sees while the float model runs ``calib_batches``, as the copy is."""
    inputs = calibration_inputs(model, calib_batches)
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    return {
        name: awq_scales(lin.weight, inputs[name], bits, group_size, awq_grid).alpha
        for name, lin in linears_to_replace(model, (), group_size)
        if id(lin.weight) not in tied
    }


def compare_methods(
    model: nn.Module,
    calib_batches,
    score: Callable[[nn.Module], float],
    methods: Sequence[str] = METHODS,
    group_sizes: Sequence[int | None] = (None, 128, 32),
    bits: int = 4,
    skip: tuple[str, ...] = (),
) -> dict:
    """Every ``(method, group_size)`` on a fresh copy of ``model``: ``{"float": score(model), "rows": [{"method",
    "group_size", "score", "seconds", "cpu_seconds"}]}``; ``seconds`` is the wall-clock time quantization took
    (calibration included), ``cpu_seconds`` this process's CPU time for it (what a busy machine does not inflate).
    ``group_size=None``: one scale per output channel."""
    check_sequence("methods", methods, min_len=1, items=partial(check_choice, choices=METHODS))
    check_sequence("group_sizes", group_sizes, min_len=1, note="group sizes, None: one scale per channel")
    rows = []
    for g in group_sizes:
        for method in methods:
            t0, c0 = time.perf_counter(), time.process_time()
            q = quantize_copy(model, method, calib_batches, bits, g, skip)
            seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
            rows.append(
                {
                    "method": method,
                    "group_size": g,
                    "score": float(score(q)),
                    "seconds": seconds,
                    "cpu_seconds": cpu_seconds,
                }
            )
    return {"float": float(score(model)), "rows": rows}


def method_study(
    gpt: nn.Module,
    tokenizer,
    minilm: nn.Module,
    mtok,
    group_sizes: Sequence[int | None] = (None, 32),
    gpt_cal_batches: int = 8,
    n_lines: int = 32,
) -> dict:
    """Chapter 09's comparison of round-to-nearest, GPTQ and AWQ at int4 (``compare_methods`` on both models).

    The GPT: calibrated on ``gpt_cal_batches`` windows of 8 x 128 tokens of the training plays
    (``gpt_calibration_batches``), scored by perplexity on the first 4 of the chapter's held-out batches
    (``shakespeare_val_batches``); then GPTQ per channel again with half the calibration windows. MiniLM: calibrated
    on ``n_lines`` lines of the training plays (seed 0), scored by embedding agreement on ``n_lines`` held-out lines
    (seed 1). Returns plain numbers: ``{"gpt": {"float", "rows", "calibration_tokens", "held_out_tokens",
    "gptq_half": {"score", "calibration_tokens"}}, "minilm": {"float", "rows", "calibration_lines", "eval_lines"}}``.
    """
    calib = gpt_calibration_batches(tokenizer, gpt.cfg.block_size, n_batches=gpt_cal_batches, batch_size=8)
    held_out = shakespeare_val_batches(gpt.cfg.block_size, n_batches=4)  # the chapter's val_batches[:4]
    gpt_res = compare_methods(gpt, calib, lambda m: gpt_perplexity(m, held_out), group_sizes=group_sizes)
    half = calib[: gpt_cal_batches // 2]  # the same seeded windows as gpt_calibration_batches(n_batches=half)
    gpt_res["gptq_half"] = {
        "score": gpt_perplexity(quantize_copy(gpt, "gptq", half), held_out),
        "calibration_tokens": sum(x.numel() for x, _ in half),
    }
    gpt_res["calibration_tokens"] = sum(x.numel() for x, _ in calib)
    gpt_res["held_out_tokens"] = sum(y.numel() for _, y in held_out)
    cal_lines, eval_lines = shakespeare_lines("train", n_lines, seed=0), shakespeare_lines("val", n_lines, seed=1)
    ref = sentence_embeddings(minilm, mtok, eval_lines)
    mini_res = compare_methods(
        minilm,
        sentence_batches(mtok, cal_lines),
        lambda m: embedding_agreement(m, mtok, eval_lines, ref),
        group_sizes=group_sizes,
    )
    mini_res.update(calibration_lines=len(cal_lines), eval_lines=len(eval_lines))
    return {"gpt": gpt_res, "minilm": mini_res}


def committed_study(path: Path | str = STUDY_PATH) -> dict:
    """The ``method_study`` results written by ``python -m transformer_lib.experiments.quant_methods``, with a
    ``"produced"`` record (date, torch, CPU capability, threads) of the run that computed them."""
    return json.loads(Path(path).read_text())  # a per-channel row's group_size: null -> None


def _write_study(path: Path | str = STUDY_PATH) -> dict:
    torch.manual_seed(0)
    gpt, tokenizer = load_shakespeare_gpt("cpu")
    minilm, mtok = load_minilm("cpu")
    study = method_study(gpt, tokenizer, minilm, mtok)
    study["produced"] = {
        "by": "python -m transformer_lib.experiments.quant_methods",
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
    }
    Path(path).write_text(json.dumps(study, indent=1) + "\n")
    return study


def score_of(results: dict, method: str, group_size: int | None) -> float:
    """The score ``compare_methods`` recorded for ``(method, group_size)``."""
    for row in results["rows"]:
        if row["method"] == method and row["group_size"] == group_size:
            return row["score"]
    raise KeyError(f"no row for method={method!r}, group_size={group_size!r}")


# ----------------------------------------------------------------------------- SmoothQuant (W8A8)
def smoothquant_agreement(
    model: nn.Module, tokenizer, calib_batches, sentences: Sequence[str], alphas: Sequence[float] = (0.25, 0.5, 0.75)
) -> dict:
    """MiniLM's embedding agreement with int8 weights only, with W8A8 (per-token int8 activations) as is, and
    with W8A8 after SmoothQuant at each ``alpha``: ``{"int8 weights": a, "W8A8": a, "smooth": {alpha: a}}``.
    The W8A8 products run as exact float32 sums (``int8_kernel``): the same integers, and much faster than
    ``torch._int_mm`` on a CPU without int8 dot-product instructions."""
    reference = sentence_embeddings(model, tokenizer, list(sentences))

    def agree(m):
        with int8_kernel(m, "float32"):
            return embedding_agreement(m, tokenizer, sentences, reference)

    return {
        "int8 weights": agree(quantize_model(copy.deepcopy(model), 8)),
        "W8A8": agree(quantize_model(copy.deepcopy(model), 8, act_bits=8)),
        "smooth": {a: agree(smoothquant_model(copy.deepcopy(model), calib_batches, a)) for a in alphas},
    }


@torch.no_grad()
def outlier_migration(x: torch.Tensor, weight: torch.Tensor, alpha: float = 0.5) -> dict:
    """What smoothing does to one layer: ``x: (n, K)`` its inputs, ``weight: (N, K)``. For the input channel with
    the largest ``|x|`` (``channel``) and for the median channel, the largest ``|x|`` before and after dividing by
    ``s`` (``smoothing_factors``), the largest ``|w|`` of that weight column before and after multiplying by
    ``s``, and the int8 per-token error of the layer output (relative norm) before and after."""
    x, w = x.detach().float(), weight.detach().float().to(x.device)
    s = smoothing_factors(x.abs().amax(dim=0), w, alpha)  # (K,)
    col_x, col_w = x.abs().amax(dim=0), w.abs().amax(dim=0)  # (K,), (K,)
    j = int(col_x.argmax())

    ref = x @ w.T  # (n, N): the float layer's output

    def w8a8_error(xs, ws):  # per-token int8 inputs, per-row int8 weights, as QuantLinear(act_bits=8) computes
        xq, sx = quantize_per_token(xs)  # (n, K) int8, (n, 1)
        return (((xq.float() * sx) @ rtn_weight(ws, 8, None).T - ref).norm() / ref.norm()).item()

    return {
        "channel": j,
        "x_max_before": col_x[j].item(),
        "x_max_after": (col_x[j] / s[j]).item(),
        "x_median_before": col_x.median().item(),
        "x_median_after": (col_x / s).median().item(),
        "w_max_before": col_w[j].item(),
        "w_max_after": (col_w[j] * s[j]).item(),
        "error_before": w8a8_error(x, w),
        "error_after": w8a8_error(x / s, w * s),
    }


def layer_inputs(model: nn.Module, calib_batches, name: str) -> torch.Tensor:
    """What the linear layer ``name`` receives while ``model`` runs ``calib_batches``: ``(tokens, in_features)``."""
    inputs = calibration_inputs(model, calib_batches)
    check_choice("name", name, inputs)  # the model's linear layers
    return inputs[name]


# ----------------------------------------------------------------------------- NF4 vs int4
def linear_weights(model: nn.Module) -> torch.Tensor:
    """Every ``nn.Linear`` weight of ``model`` flattened row by row into one ``(numel,)`` float32 CPU tensor (a
    tied weight once): blocks of 64 consecutive values then lie within a row when ``in_features`` is a multiple
    of 64."""
    seen, parts = set(), []
    for m in model.modules():
        if isinstance(m, nn.Linear) and id(m.weight) not in seen:
            seen.add(id(m.weight))
            parts.append(m.weight.detach().float().cpu().reshape(-1))
    check_int("the nn.Linear layers in model", len(parts), min=1, note=f"model is a {type(model).__name__}")
    return torch.cat(parts)


def nf4_vs_int4(weights: dict[str, torch.Tensor], block_size: int = 64) -> dict[str, dict[str, float]]:
    """``compare_nf4_int4`` for each named weight tensor, each MSE also divided by the tensor's mean square
    (``"<format> rel"``), so sources of different scale compare: ``{name: {"nf4", "int4_absmax",
    "int4_zero_point", "nf4 rel", ...}}``."""
    out = {}
    for name, w in weights.items():
        mse = compare_nf4_int4(w, block_size)
        power = w.detach().float().pow(2).mean().item()
        out[name] = {**mse, **{f"{k} rel": v / power for k, v in mse.items()}}
    return out


if __name__ == "__main__":  # recompute chapter 09's method comparison and write it where the chapter reads it
    torch.set_num_threads(1)
    print(json.dumps(_write_study()["produced"]))
