"""Chapter 08 at real scale: which of MiniLM's 72 heads can go? (also ``benchmarks/_bench_pruning.py``)

Used in chapter 08.

all-MiniLM-L6-v2 (6 layers x 12 heads, ``pretrained.load_minilm``) maps a sentence to a unit vector. Quality after
pruning is **agreement**: the mean cosine similarity between the pruned model's embeddings and the unpruned
model's, on held-out Shakespeare lines (``corpus_lines``, ``sentence_sets``: disjoint sets, one per seed).

* **The loss is flat where Michel et al. differentiate.** ``agreement_loss`` (``1 - cos`` against the unpruned
  embeddings) is 0 at the all-ones mask, its minimum, so its gradient there is 0 for every sentence: the
  first-order term of its Taylor expansion vanishes and the second, ``|d e / d xi_h|^2 / 2``, says what masking
  head ``h`` costs. ``probe_loss`` makes Michel et al.'s score measure that: it projects each sentence's
  embedding ``e`` on a random Gaussian direction ``r``, ``L = r . e``, so ``|dL / d xi_h| = |r . (d e / d xi_h)|``,
  whose mean over directions is ``sqrt(2 / pi) |d e / d xi_h|``: how far the embedding moves per unit of gate.
  ``sensitivity_importance`` is ``pruning.head_importance`` with that loss.
* ``ablation``: the measured cost of masking each head alone; ``agreement_curve``: agreement with the ``n``
  lowest-scoring heads masked, for several ``n``; ``t_interval``: a Student-t confidence interval over sets.
* ``keep_top_k_scores``: the source article's "head sparsification", rewritten: it zeroes score entries, it
  removes no head and no weight.
* ``chapter_study``: chapter 08's run of ``pruning_study`` and ``ablation`` (about 15 s of CPU, too long for the
  page): ``python -m transformer_lib.experiments.minilm_pruning`` writes it to ``checkpoints/minilm_pruning.json``
  (``STUDY_PATH``), the chapter reads it with ``committed_study``, and a slow test recomputes it and compares.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_int, check_number
from ..data.corpus import shakespeare_works
from ..models.pretrained import mean_pool
from ..compression.pruning import (
    head_counts,
    head_importance,
    head_mask,
    heads_to_prune,
    magnitude_importance,
    mask_from_heads,
    random_importance,
)
from ..book_tools.timing import interleaved_medians, interleaved_times
from ..checkpoints import CHECKPOINT_DIR

MAX_TOKENS = 32  # sentences are cut to 32 word pieces ([CLS] and [SEP] included)
STUDY_PATH = CHECKPOINT_DIR / "minilm_pruning.json"
CHAPTER = {"n_sets": 4, "size": 24, "ns": [9, 18, 27, 36], "probes": 2, "seed": 0, "ablation_lines": 8}


# ----------------------------------------------------------------------------- sentences
def corpus_lines(min_words: int = 6) -> list[str]:
    """Verse lines of the 42 works with at least ``min_words`` words, starting with a letter, not all capitals
    (which drops speaker names and stage headings). In the corpus' order; about 89,000 lines."""
    check_int("min_words", min_words, min=1)
    lines = (line.strip() for text in shakespeare_works().values() for line in text.splitlines())
    return [s for s in lines if len(s.split()) >= min_words and s[0].isalpha() and not s.isupper()]


def sentence_sets(n_sets: int, size: int, seed: int = 0, lines: Sequence[str] | None = None) -> list[list[str]]:
    """``n_sets`` disjoint sets of ``size`` lines each, drawn at random (``seed``) from ``lines``
    (default ``corpus_lines()``): no line appears in two sets."""
    for name, v in (("n_sets", n_sets), ("size", size)):
        check_int(name, v, min=1)
    pool = sorted(set(corpus_lines() if lines is None else lines))  # distinct lines, in a fixed order
    check_int("n_sets * size", n_sets * size, max=len(pool), note="lines needed: at most the distinct lines given")
    random.Random(seed).shuffle(pool)
    return [pool[i * size : (i + 1) * size] for i in range(n_sets)]


# ----------------------------------------------------------------------------- embeddings and losses
def embed(model: nn.Module, enc: dict[str, torch.Tensor]) -> torch.Tensor:
    """Unit-norm mean-pooled embeddings ``(B, d_model)`` of a tokenized batch ``enc`` (``MiniLMTokenizer.encode``),
    differentiable (no ``no_grad``), in the model's dtype. Same as ``pretrained.sentence_embeddings``."""
    device = next(model.parameters()).device
    ids, am = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    return F.normalize(mean_pool(model(ids, am).last_hidden_state, am), dim=-1)


def agreement_loss(model: nn.Module, batch) -> torch.Tensor:
    """``batch = (input_ids, attention_mask, target)``: mean over sentences of ``1 - cos(e, target)``, where
    ``target: (B, d_model)`` are the unpruned model's unit embeddings. 0 (its minimum) for the unpruned model."""
    ids, am, target = batch
    e = embed(model, {"input_ids": ids, "attention_mask": am})  # (B, D)
    return (1 - (e * target).sum(-1)).mean()


def probe_loss(model: nn.Module, batch) -> torch.Tensor:
    """``batch = (input_ids, attention_mask, r)``: mean over sentences of ``r_b . e_b``, the embedding seen along
    a direction ``r: (B, d_model)``. Its gradient with respect to a gate is that gate's embedding change along r."""
    ids, am, r = batch
    return (embed(model, {"input_ids": ids, "attention_mask": am}) * r).sum(-1).mean()


def sensitivity_importance(
    model: nn.Module, enc: dict[str, torch.Tensor], probes: int = 4, seed: int = 0
) -> torch.Tensor:
    """Michel et al.'s ``E |dL / d xi[l, h]|`` at ``xi = 1`` with ``L = probe_loss``: ``(n_layers, n_heads)``.

    Each sentence of ``enc`` is seen along ``probes`` independent standard-normal directions (seeded), in one
    backward pass of ``probes * B`` rows. The expected score is ``sqrt(2 / pi) E_x |d e(x) / d xi[l, h]|``.
    """
    check_int("probes", probes, min=1)
    ids, am = enc["input_ids"].repeat(probes, 1), enc["attention_mask"].repeat(probes, 1)  # (probes * B, T)
    r = torch.randn(ids.shape[0], _width(model), generator=torch.Generator().manual_seed(seed))  # (probes * B, D)
    return head_importance(model, [(ids, am, r)], loss_fn=probe_loss)


def _width(model: nn.Module) -> int:
    d_model = getattr(getattr(model, "cfg", None), "d_model", None)
    return check_int("model.cfg.d_model", d_model, min=1, note=f"the width of model, a {type(model).__name__}")


@torch.no_grad()
def masked_embed(model: nn.Module, enc: dict[str, torch.Tensor], mask=None) -> torch.Tensor:
    """``embed`` without gradients, the heads gated by ``mask`` (``pruning.head_mask``; None = all heads)."""
    if mask is None:
        return embed(model, enc)
    with head_mask(model, mask):
        return embed(model, enc)


def agreement(model: nn.Module, enc: dict[str, torch.Tensor], target: torch.Tensor, mask=None) -> torch.Tensor:
    """Cosine similarity ``(B,)`` of each sentence's embedding to ``target: (B, d_model)`` (unit rows), with the
    heads gated by ``mask`` (None = all heads)."""
    return (masked_embed(model, enc, mask) * target).sum(-1)


def ablation(model: nn.Module, enc: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """``(n_layers, n_heads)``: mean ``1 - cos`` to ``target`` when head ``(l, h)`` alone is masked
    (one forward pass per head)."""
    counts = head_counts(model)
    cost = torch.zeros(len(counts), max(counts))
    for layer, n in enumerate(counts):
        for h in range(n):
            mask = mask_from_heads(counts, {layer: [h]}).to(target.device)
            cost[layer, h] = float((1 - agreement(model, enc, target, mask)).mean())
    return cost


def agreement_curve(
    model: nn.Module, enc: dict[str, torch.Tensor], target: torch.Tensor, scores: torch.Tensor, ns: Sequence[int]
) -> list[float]:
    """Mean agreement with the ``n`` lowest-``scores`` heads masked (``pruning.heads_to_prune``), for each ``n``
    of ``ns``. Masking equals removing the heads (``pruning.prune_heads``), and is cheaper to set up."""
    counts = head_counts(model)
    return [
        float(
            agreement(model, enc, target, mask_from_heads(counts, heads_to_prune(scores, n)).to(target.device)).mean()
        )
        for n in ns
    ]


# ----------------------------------------------------------------------------- the study
def pruning_study(
    model: nn.Module,
    tokenizer,
    n_sets: int = 4,
    size: int = 32,
    ns: Sequence[int] = (0, 36),
    probes: int = 4,
    seed: int = 0,
    magnitude: torch.Tensor | None = None,
) -> dict:
    """The three pruning orders on ``n_sets`` pairs of disjoint sentence sets: for set ``s``, the heads are scored
    on one set of ``size`` lines and the pruned models judged on another.

    Returns ``{"ns": list(ns), "curves": {method: (n_sets, len(ns)) tensor of mean agreement},
    "scores": {method: [(n_layers, n_heads) per set]}, "sets": [(scoring lines, evaluation lines)],
    "eval": [(evaluation batch, its unpruned embeddings (size, d_model))]}``. Methods:
    ``"gradient"`` (``sensitivity_importance``, set ``s`` seeds its probes), ``"magnitude"`` (weight norms, the same
    for every set; pass ``pruning.magnitude_importance(model)``), ``"random"`` (a random order seeded by ``s``).
    """
    lines = sentence_sets(2 * n_sets, size, seed)
    magnitude = magnitude_importance(model) if magnitude is None else magnitude
    curves = {m: torch.zeros(n_sets, len(ns)) for m in ("gradient", "magnitude", "random")}
    scores, evals = {m: [] for m in curves}, []
    for s in range(n_sets):
        score_enc = tokenizer.encode(lines[2 * s], max_length=MAX_TOKENS)
        eval_enc = tokenizer.encode(lines[2 * s + 1], max_length=MAX_TOKENS)
        target = masked_embed(model, eval_enc)  # (size, D): the unpruned model's embeddings
        evals.append((eval_enc, target))
        scores["gradient"].append(sensitivity_importance(model, score_enc, probes, seed=s))
        scores["magnitude"].append(magnitude)
        scores["random"].append(random_importance(model, seed=s))
        for m in curves:
            curves[m][s] = torch.tensor(agreement_curve(model, eval_enc, target, scores[m][s], ns))
    return {
        "ns": list(ns),
        "curves": curves,
        "scores": scores,
        "eval": evals,
        "sets": [(lines[2 * s], lines[2 * s + 1]) for s in range(n_sets)],
    }


# ----------------------------------------------------------------------------- confidence intervals
def t_cdf(x: float, df: int, steps: int = 2000) -> float:
    """Student-t distribution function ``P(T <= x)``, ``df`` degrees of freedom: ``1/2 + integral_0^x`` of the
    density ``Gamma((df+1)/2) / (sqrt(df pi) Gamma(df/2)) (1 + t^2/df)^(-(df+1)/2)`` (Simpson's rule)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def pdf(t):
        return c * (1 + t * t / df) ** (-(df + 1) / 2)

    h = x / steps  # steps is even
    inner = sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, steps))
    return 0.5 + h / 3 * (pdf(0.0) + inner + pdf(x))


@functools.lru_cache(maxsize=64)
def t_quantile(p: float, df: int) -> float:
    """The ``x`` with ``t_cdf(x, df) = p`` (``0.5 < p < 1``), by bisection: e.g. 2.776 for ``p=0.975, df=4``."""
    check_number("p", p, min=0.5, max=1, min_open=True, max_open=True)
    check_int("df", df, min=1)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2 * hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def t_interval(values, level: float = 0.95) -> tuple[float, float]:
    """``(mean, half_width)`` of the Student-t confidence interval for the mean of ``values`` (n >= 2 numbers,
    treated as independent draws): ``half_width = t_{(1+level)/2, n-1} * sd / sqrt(n)``, sd with ``n - 1``."""
    x = torch.as_tensor(values, dtype=torch.float64).flatten()
    check_int("the number of values", x.numel(), min=2, note="an interval needs two at least")
    check_number("level", level, min=0, max=1, min_open=True, max_open=True)
    n = x.numel()
    return float(x.mean()), t_quantile((1 + level) / 2, n - 1) * float(x.std(correction=1)) / math.sqrt(n)


# ----------------------------------------------------------------------------- speed, and the article's code
def encoder_speeds(
    variants: dict[str, tuple[nn.Module, torch.Tensor | None]],
    enc: dict[str, torch.Tensor],
    repeats: int = 5,
    device=None,
) -> dict[str, float]:
    """Median seconds of one forward pass over ``enc`` for ``variants: {name: (model, head mask or None)}``,
    timed round-robin (``timing.interleaved_medians``)."""

    def call(model, mask):
        return lambda: masked_embed(model, enc, mask)

    return interleaved_medians(
        {name: call(m, mask) for name, (m, mask) in variants.items()}, repeats=repeats, warmup=1, device=device
    )


def encoder_times(
    variants: dict[str, tuple[nn.Module, torch.Tensor | None]],
    enc: dict[str, torch.Tensor],
    repeats: int = 9,
    device=None,
) -> dict[str, list[float]]:
    """Every round's seconds of one forward pass over ``enc`` per variant (``timing.interleaved_times``; round
    ``r`` of every list timed in the same pass): ``encoder_speeds`` with the rounds kept, for intervals."""

    def call(model, mask):
        return lambda: masked_embed(model, enc, mask)

    return interleaved_times(
        {name: call(m, mask) for name, (m, mask) in variants.items()}, repeats=repeats, warmup=1, device=device
    )


def keep_top_k_scores(scores: torch.Tensor, k: int = 2) -> torch.Tensor:
    """The source article's "head sparsification", written our way: along the last dimension of ``scores``,
    keep the entries at least as large as the ``k``-th largest and put 0 in the others (shape unchanged)."""
    check_int("k", k, min=1, max=scores.shape[-1], note="the last dimension")
    kth = scores.topk(k, dim=-1).values[..., -1:]  # (..., 1): the k-th largest of each row
    return torch.where(scores >= kth, scores, torch.zeros_like(scores))


# ----------------------------------------------------------------------------- chapter 08's committed run
def chapter_study(
    model: nn.Module,
    tokenizer,
    n_sets: int = 4,
    size: int = 24,
    ns: Sequence[int] = (9, 18, 27, 36),
    probes: int = 2,
    seed: int = 0,
    ablation_lines: int = 8,
) -> dict:
    """Chapter 08's MiniLM study as plain lists: ``pruning_study``'s curves (``{method: n_sets x len(ns)}``), the
    gradient scores of every scoring set and the weight norms (``(n_layers, n_heads)`` each), and the ``ablation``
    of each head on the first ``ablation_lines`` lines of the first evaluation set."""
    study = pruning_study(model, tokenizer, n_sets, size, ns, probes=probes, seed=seed)
    abl_enc = tokenizer.encode(study["sets"][0][1][:ablation_lines], max_length=MAX_TOKENS)
    abl = ablation(model, abl_enc, masked_embed(model, abl_enc))
    return {
        "params": {
            "n_sets": n_sets,
            "size": size,
            "ns": list(ns),
            "probes": probes,
            "seed": seed,
            "ablation_lines": ablation_lines,
        },
        "curves": {m: c.tolist() for m, c in study["curves"].items()},
        "gradient": [g.tolist() for g in study["scores"]["gradient"]],
        "magnitude": study["scores"]["magnitude"][0].tolist(),
        "ablation": abl.tolist(),
    }


def committed_study(path: Path | str = STUDY_PATH) -> dict:
    """``chapter_study``'s results as written by ``python -m transformer_lib.experiments.minilm_pruning``, lists
    turned back into tensors: ``curves[method]: (n_sets, len(ns))``, ``gradient: [(n_layers, n_heads)]``,
    ``magnitude`` and ``ablation: (n_layers, n_heads)``, and ``"produced"`` (date, torch, CPU capability)."""
    data = json.loads(Path(path).read_text())
    data["curves"] = {m: torch.tensor(c) for m, c in data["curves"].items()}
    data["gradient"] = [torch.tensor(g) for g in data["gradient"]]
    data["magnitude"], data["ablation"] = torch.tensor(data["magnitude"]), torch.tensor(data["ablation"])
    return data


def _write_study(path: Path | str = STUDY_PATH) -> dict:
    from ..models.pretrained import load_minilm

    model, tokenizer = load_minilm("cpu")
    t0 = time.process_time()
    study = chapter_study(model, tokenizer, **CHAPTER)
    study["produced"] = {
        "by": "python -m transformer_lib.experiments.minilm_pruning",
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "cpu_seconds": round(time.process_time() - t0, 1),
    }
    Path(path).write_text(json.dumps(study) + "\n")
    return study


if __name__ == "__main__":  # recompute chapter 08's MiniLM study and write it where the chapter reads it
    torch.set_num_threads(1)
    print(json.dumps(_write_study()["produced"]))
