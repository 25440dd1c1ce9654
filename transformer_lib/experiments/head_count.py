"""One head against several at the same width (chapter 03): a task that needs two positions at once.

Used in chapter 03.

Nine models (three head counts x three seeds) take longer to train than the page can afford;
``scripts/train_head_count.py`` trains them with ``HeadCountConfig()`` into ``checkpoints/head_count_models.*``
and the page loads them (``load_runs``) and measures their accuracy again.

The task, "flagged pair": a sequence of random values from ``[0, V)``; exactly two positions, drawn at random
in the first half, carry a flag (the token id is ``value + V``). At every position after the second flag the
model must output the *ordered* pair ``(first flagged value, second flagged value)`` as one class
``V * first + second`` out of ``V**2``. One causal attention layer reads the sequence and a small MLP maps its
output to the class. A head returns one weighted average of value vectors: to give both values and which came
first, one head must spread its weight over both flagged positions and keep them apart inside a single blend,
whose weights shift with where the flags fall. With two heads, each can read one of the two flags
(``flag_weights`` measures which).
Every model has the same ``d_model`` and the same number of parameters: only how the width is cut into heads
changes.

Knowing the two values but not their order, the best guess scores ``order_blind_accuracy(V)`` (right whenever
the two values are equal, half the time otherwise); guessing blindly scores ``1 / V**2``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

from ..data.checkpoint_io import load_weights, provenance, save_tensors_and_record
from ..utils.checks import check_choice, check_int, check_sequence
from ..utils.device import default_device
from ..blocks.masking import causal_mask
from ..utils.modes import eval_mode
from ..blocks.multihead import MultiHeadAttention
from ..training.loop import TrainConfig
from ..training.loop import train as train_loop
from .threads import torch_threads
from ..checkpoints import CHECKPOINT_DIR

IGNORE = -100  # positions without a target (up to and including the second flag)
HEAD_COUNTS, SEEDS = (1, 2, 4), (0, 1, 2)  # the chapter's comparison
CHECKPOINT = CHECKPOINT_DIR / "head_count_models"


def flagged_pair_batch(
    batch_size: int, length: int, vocab_size: int, generator: torch.Generator | None = None, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences with two flagged values and their ordered-pair targets.

    Returns ``idx: (B, T)`` in ``[0, 2V)`` (``value + V`` at the two flagged positions, which lie in
    ``[0, T // 2)``) and ``targets: (B, T)``: ``V * first + second`` at every position after the second flag,
    ``-100`` elsewhere.
    """
    check_int("length", length, min=4, note="two flags in the first half")
    check_int("vocab_size", vocab_size, min=2)
    values = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, T)
    places = torch.rand(batch_size, length // 2, generator=generator).argsort(1)[:, :2].sort(1).values  # (B, 2)
    rows = torch.arange(batch_size)
    first, second = values[rows, places[:, 0]], values[rows, places[:, 1]]  # (B,) each
    flags = torch.zeros_like(values)
    flags[rows[:, None], places] = 1
    after = torch.arange(length)[None, :] > places[:, 1:]  # (B, T): strictly after the second flag
    targets = torch.where(after, (vocab_size * first + second)[:, None], torch.full_like(values, IGNORE))
    return (values + vocab_size * flags).to(device), targets.to(device)


def order_blind_accuracy(vocab_size: int) -> float:
    """Best accuracy knowing both values but not their order: ``1/V + (1 - 1/V) / 2``."""
    return 1 / vocab_size + (1 - 1 / vocab_size) / 2


@dataclass
class HeadCountConfig:
    """The experiment's settings: task, model size, training budget (a few seconds per model on a CPU)."""

    vocab_size: int = 8  # V values; the input has 2V token ids (flagged or not), the output V**2 classes
    length: int = 16
    d_model: int = 32
    d_hidden: int = 128  # width of the MLP that reads the attention output
    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    eval_size: int = 1024  # sequences in the (fixed) evaluation batch
    seed: int = 0


class PairReader(nn.Module):
    """Token + position embeddings, one causal ``MultiHeadAttention`` layer with a residual, an MLP to ``V**2``
    classes. ``forward(idx: (B, T)) -> logits: (B, T, V**2)``."""

    def __init__(self, cfg: HeadCountConfig, n_heads: int):
        super().__init__()
        d, V = cfg.d_model, cfg.vocab_size
        self.tok = nn.Embedding(2 * V, d)
        self.pos = nn.Embedding(cfg.length, d)
        self.attn = MultiHeadAttention(d, n_heads)
        self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, cfg.d_hidden), nn.GELU(), nn.Linear(cfg.d_hidden, V * V))

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token + position embeddings: ``(B, T) -> (B, T, d_model)``."""
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.embed(idx)  # (B, T, d_model)
        x = x + self.attn(x, attn_mask=causal_mask(T, device=idx.device))[0]  # (B, T, d_model)
        return self.mlp(x)  # (B, T, V**2)

    def attention_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """The attention layer's weights on ``idx: (B, T)``: ``(B, H, T, T)``, row ``t`` = query ``t``."""
        T = idx.shape[1]
        return self.attn(self.embed(idx), attn_mask=causal_mask(T, device=idx.device), need_weights=True)[1]


def pair_loss(model: nn.Module, batch) -> torch.Tensor:
    """Cross-entropy over the scored positions of a ``flagged_pair_batch``."""
    idx, targets = batch
    return F.cross_entropy(model(idx).flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


@torch.no_grad()
def accuracy(model: nn.Module, cfg: HeadCountConfig, seed: int = 1234) -> float:
    """Fraction of scored positions whose argmax class is the right ordered pair, on one fixed fresh batch."""
    device = next(model.parameters()).device
    idx, targets = flagged_pair_batch(
        cfg.eval_size, cfg.length, cfg.vocab_size, torch.Generator().manual_seed(seed), device
    )
    valid = targets != IGNORE  # (B, T)
    with eval_mode(model):
        correct = (model(idx).argmax(-1) == targets) & valid
    return correct.sum().item() / valid.sum().item()


@torch.no_grad()
def flag_weights(
    model: PairReader, cfg: HeadCountConfig, seed: int = 1234, n: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each head's attention weight on the first and on the second flagged position, at every scored position of
    a fixed fresh batch of ``n`` sequences (default ``cfg.eval_size``: then the batch ``accuracy`` scores with the
    same ``seed``): ``(first, second)``, each ``(N, H)`` for the ``N`` scored positions (query after the second
    flag) and ``H`` heads."""
    device = next(model.parameters()).device
    idx, targets = flagged_pair_batch(
        cfg.eval_size if n is None else n, cfg.length, cfg.vocab_size, torch.Generator().manual_seed(seed), device
    )
    B, T = idx.shape
    with eval_mode(model):
        w = model.attention_weights(idx)  # (B, H, T, T)
    places = (idx >= cfg.vocab_size).nonzero()[:, 1].view(B, 2)  # (B, 2): the two flagged positions, in order
    scored = targets != IGNORE  # (B, T)
    on = [
        w.gather(-1, places[:, k].view(B, 1, 1, 1).expand(B, w.shape[1], T, 1))
        .squeeze(-1)  # (B, H, T)
        .transpose(1, 2)[scored]
        for k in (0, 1)
    ]  # (N, H)
    return on[0], on[1]


def flag_summary(first: torch.Tensor, second: torch.Tensor) -> dict:
    """A few numbers from ``flag_weights``' ``(N, H)`` pair: ``on_flags`` (mean weight on the two flags together),
    ``one_sided`` (mean ``|first - second|`` over positions and heads: 0 = split evenly between the flags, 1 = all on
    one), ``earlier`` (``(H,)``, each head's mean weight on the earlier flag) and, for two heads, ``opposite``
    (share of positions where the two heads favour different flags; ``None`` for other head counts)."""
    diff = first - second  # (N, H): > 0 where a head favours the earlier flag
    opposite = (diff[:, 0] * diff[:, 1] < 0).float().mean().item() if first.shape[1] == 2 else None
    return {
        "on_flags": (first + second).mean().item(),
        "one_sided": diff.abs().mean().item(),
        "earlier": first.mean(0),
        "opposite": opposite,
    }


def train_one(n_heads: int, cfg: HeadCountConfig, device=None) -> dict:
    """Train a seeded ``PairReader`` with ``n_heads`` heads: ``{"model", "losses", "accuracy", "params"}``
    (``model`` in eval mode)."""
    torch.manual_seed(cfg.seed)
    model = PairReader(cfg, n_heads)
    gen = torch.Generator().manual_seed(cfg.seed)
    tcfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup_steps=cfg.steps // 10,
        weight_decay=0.0,
        seed=cfg.seed,
        progress=False,
        optimizer="adam",
    )
    batch_fn = lambda step: flagged_pair_batch(cfg.batch_size, cfg.length, cfg.vocab_size, gen)  # noqa: E731
    hist = train_loop(model, batch_fn, tcfg, pair_loss, device=device, desc=f"{n_heads} head(s)")
    return {
        "model": model.eval(),
        "losses": hist.train_loss,
        "accuracy": accuracy(model, cfg),
        "params": sum(p.numel() for p in model.parameters()),
    }


def run_experiment(head_counts=HEAD_COUNTS, seeds=SEEDS, cfg: HeadCountConfig | None = None, device=None) -> dict:
    """Train one model per (head count, seed). Returns ``{n_heads: [train_one(...) for each seed]}``."""
    cfg = cfg or HeadCountConfig()
    divisors = [h for h in range(1, cfg.d_model + 1) if cfg.d_model % h == 0]  # the head counts d_model splits into
    check_sequence("head_counts", head_counts, min_len=1, items=partial(check_choice, choices=divisors))
    with torch_threads(1):  # a tiny model: one thread is faster than two on a busy CPU
        return {h: [train_one(h, replace(cfg, seed=s), device) for s in seeds] for h in head_counts}


def train_runs(head_counts=HEAD_COUNTS, seeds=SEEDS, cfg: HeadCountConfig | None = None, device=None) -> dict:
    """``run_experiment`` with what a checkpoint records: ``{"runs": {n_heads: [result per seed]}, "cfg",
    "head_counts", "seeds", "seconds"}``."""
    cfg = cfg or HeadCountConfig()
    start = time.perf_counter()
    runs = run_experiment(head_counts, seeds, cfg, device)
    return {
        "runs": runs,
        "cfg": cfg,
        "head_counts": list(head_counts),
        "seeds": list(seeds),
        "seconds": time.perf_counter() - start,
    }


def save_runs(trained: dict, stem: Path = CHECKPOINT) -> None:
    """``<stem>.safetensors`` (every model's weights, keys ``heads<h>.seed<s>.<parameter>``) and ``<stem>.json``
    (config, head counts, seeds, every training loss and the accuracy measured after training, how long it took,
    on what)."""
    tensors, losses, accuracies = {}, {}, {}
    for h, results in trained["runs"].items():
        for s, r in zip(trained["seeds"], results):
            tensors.update(
                {f"heads{h}.seed{s}.{k}": v.detach().contiguous().cpu() for k, v in r["model"].state_dict().items()}
            )
            losses[f"{h}/{s}"], accuracies[f"{h}/{s}"] = r["losses"], r["accuracy"]
    record = {
        "config": asdict(trained["cfg"]),
        "head_counts": trained["head_counts"],
        "seeds": trained["seeds"],
        "train_seconds": round(trained["seconds"], 1),
        "losses": losses,
        "accuracy_after_training": accuracies,
        **provenance(threads=1),
    }
    save_tensors_and_record(stem, tensors, record)


def load_runs(device=None, stem: Path = CHECKPOINT) -> dict:
    """The committed runs in ``train_runs``'s structure (models in eval mode on ``device``; each result's
    ``accuracy`` is the one recorded after training: measure it again with ``accuracy``), plus ``"record"``."""
    record = json.loads(stem.with_suffix(".json").read_text())
    tensors = load_file(str(stem.with_suffix(".safetensors")), device="cpu")
    cfg = HeadCountConfig(**record["config"])
    runs = {}
    for h in record["head_counts"]:
        runs[h] = []
        for s in record["seeds"]:
            prefix = f"heads{h}.seed{s}."
            model = PairReader(replace(cfg, seed=s), h)
            load_weights(
                model,
                {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)},
                device or default_device(),
            )
            runs[h].append(
                {
                    "model": model.eval(),
                    "losses": record["losses"][f"{h}/{s}"],
                    "accuracy": record["accuracy_after_training"][f"{h}/{s}"],
                    "params": sum(p.numel() for p in model.parameters()),
                }
            )
    return {
        "runs": runs,
        "cfg": cfg,
        "head_counts": record["head_counts"],
        "seeds": record["seeds"],
        "seconds": record["train_seconds"],
        "record": record,
    }
