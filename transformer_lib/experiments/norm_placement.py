"""Chapter 05's norm-placement experiment: the same tiny GPT trained with no LayerNorm, post-norm (the 2017
paper) and pre-norm (GPT-2), over several seeds; ``gradient_norms_by_layer`` at initialisation; and the small
statistics the chapter reads off the loss curves (``unigram_entropy``, ``steps_below``, ``largest_rise``).

Used in chapter 05.

The models are rewired by ``variants.set_norm_placement``; training is ``train.train``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ..data.checkpoint_io import atomic_write_bytes, provenance
from ..data.corpus import get_batch, shakespeare_corpus
from ..utils.device import default_device
from ..training.losses import gpt_loss
from ..models.configs import GPTConfig
from ..models.transformer import GPT
from ..training.loop import TrainConfig, evaluate_loss, train
from ..models.variants import PLACEMENTS, set_norm_placement
from .threads import torch_threads
from ..checkpoints import CHECKPOINT_DIR

# the chapter's training runs, written by scripts/train_norm_placement.py (``save_runs``), read by ``load_runs``
RECORD = CHECKPOINT_DIR / "norm_placement_runs.json"


@dataclass
class NormConfig:
    """A deep, thin character GPT at a high learning rate with no warm-up: where placement matters."""

    n_layers: int = 8
    d_model: int = 32
    n_heads: int = 4
    block_size: int = 16
    batch_size: int = 32
    steps: int = 120
    lr: float = 3e-3
    warmup_steps: int = 0
    seeds: tuple[int, ...] = (0, 1, 2)
    eval_batches: int = 4
    final_window: int = 20  # "final training loss" = mean of the last this-many steps


@dataclass
class NormRun:
    placement: str
    seed: int
    losses: list[float]  # training loss of every step (stops early if it became NaN/inf)
    val_loss: float  # on fixed held-out batches after training (nan if diverged)
    diverged: bool

    def final_loss(self, window: int) -> float:
        return float("nan") if self.diverged else sum(self.losses[-window:]) / len(self.losses[-window:])


def make_norm_model(placement: str, cfg: NormConfig, seed: int, device=None) -> GPT:
    """The experiment's GPT: same initial weights for a given seed, whatever the placement."""
    corpus = shakespeare_corpus()
    torch.manual_seed(seed)
    model = GPT(
        GPTConfig(
            vocab_size=corpus.tokenizer.vocab_size,
            block_size=cfg.block_size,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            d_model=cfg.d_model,
        )
    )
    return set_norm_placement(model, placement).to(device or default_device())


def _val_batches(cfg: NormConfig, device) -> list:
    gen = torch.Generator().manual_seed(1234)
    val = shakespeare_corpus().val
    return [get_batch(val, cfg.block_size, 32, gen, device) for _ in range(cfg.eval_batches)]


def run_norm_placement(placement: str, seed: int, cfg: NormConfig, progress: bool = True, device=None) -> NormRun:
    """Train one model with ``train.train``: AdamW (no weight decay, no clipping), linear warm-up over
    ``cfg.warmup_steps`` then a constant rate. A loss that turns NaN/inf ends the run and marks it diverged;
    nothing is raised."""
    model = make_norm_model(placement, cfg, seed, device)
    device = next(model.parameters()).device
    gen, data = torch.Generator().manual_seed(seed), shakespeare_corpus().train
    tcfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        schedule="constant",
        weight_decay=0.0,
        grad_clip=None,
        seed=seed,
        progress=progress,
        on_nonfinite="stop",
    )
    with torch_threads(1):  # a model this small trains as fast on one thread, and far faster on a busy machine
        hist = train(
            model,
            lambda step: get_batch(data, cfg.block_size, cfg.batch_size, gen),
            tcfg,
            gpt_loss,
            device=device,
            desc=f"{placement}-norm, seed {seed}",
        )
    diverged, val = hist.stopped_by == "nonfinite", float("nan")
    if not diverged:
        val = evaluate_loss(model, _val_batches(cfg, device))
        diverged = not math.isfinite(val)
    return NormRun(placement, seed, hist.train_loss, val, diverged)


def norm_placement_experiment(
    cfg: NormConfig = NormConfig(), placements=PLACEMENTS, progress: bool = True, device=None
) -> dict[str, list[NormRun]]:
    """Every placement, every seed in ``cfg.seeds``: ``{placement: [NormRun per seed]}``."""
    return {p: [run_norm_placement(p, s, cfg, progress, device) for s in cfg.seeds] for p in placements}


def save_runs(runs: dict[str, list[NormRun]], cfg: NormConfig, seconds: float, path: Path = RECORD) -> None:
    """Write every run of ``norm_placement_experiment`` (its loss at every step, validation loss, divergence) and the
    configuration to a json record."""
    record = {
        "config": asdict(cfg),
        "train_seconds": round(seconds, 1),
        "runs": [asdict(r) for rs in runs.values() for r in rs],
        **provenance(threads=1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, json.dumps(record, indent=1).encode())


def load_runs(path: Path = RECORD) -> tuple[dict[str, list[NormRun]], NormConfig, dict]:
    """The committed runs as ``norm_placement_experiment`` returns them, their ``NormConfig`` and the whole record."""
    record = json.loads(Path(path).read_text())
    cfg = NormConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["config"].items()})
    runs: dict[str, list[NormRun]] = {}
    for r in record["runs"]:
        runs.setdefault(r["placement"], []).append(NormRun(**r))
    return runs, cfg, record


def unigram_entropy(ids: torch.Tensor, vocab_size: int) -> float:
    """Entropy (nats) of the character frequencies of ``ids: (N,)``: the loss of a model that predicts every
    character with its overall frequency, ignoring the context (the first plateau of a character model)."""
    p = torch.bincount(ids, minlength=vocab_size).double() / ids.numel()
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def moving_average(values, window: int = 10) -> torch.Tensor:
    """Mean of each run of ``window`` consecutive values: ``(len(values) - window + 1,)``."""
    t = torch.tensor(values, dtype=torch.float64)
    return t.unfold(0, window, 1).mean(-1) if len(t) >= window else t


def steps_below(losses, level: float, window: int = 10) -> int | None:
    """First step at which the ``window``-step mean of ``losses`` is below ``level`` (the window's last step),
    or None if it never is."""
    below = (moving_average(losses, window) < level).nonzero()
    return None if len(below) == 0 else int(below[0]) + window - 1


def largest_rise(losses, window: int = 10) -> float:
    """The largest amount by which the ``window``-step mean loss rose above its best value so far (0 for a loss
    that never goes back up): a measure of spikes."""
    m = moving_average(losses, window)
    return float((m - torch.cummin(m, 0).values).max()) if len(m) else 0.0


def summarize_runs(runs: list[NormRun], window: int = 20, level: float | None = None) -> dict:
    """Over the seeds: ``(mean, sample std)`` of the final training loss, the validation loss and the largest
    rise (``largest_rise``) of the runs that did not diverge; how many diverged; and, if ``level`` is given,
    the steps each run took to get below it (``steps_below``; ``None`` for a run that never did)."""
    ok = [r for r in runs if not r.diverged]

    def mean_std(values):
        t = torch.tensor(values, dtype=torch.float64)
        if len(values) == 0:
            return float("nan"), float("nan")
        return float(t.mean()), float(t.std()) if len(values) > 1 else 0.0

    out = {
        "final_loss": mean_std([r.final_loss(window) for r in ok]),
        "val_loss": mean_std([r.val_loss for r in ok]),
        "largest_rise": mean_std([largest_rise(r.losses) for r in ok]),
        "diverged": len(runs) - len(ok),
        "runs": len(runs),
    }
    if level is not None:
        out["steps_below"] = [None if r.diverged else steps_below(r.losses, level) for r in runs]
    return out


def gradient_norms_by_layer(model: GPT, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(n_layers,)``: the L2 norm of the loss gradient over each block's parameters, for one batch.

    Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture") study these gradients at
    initialisation to explain why post-norm needs a learning-rate warm-up and pre-norm does not.
    """
    model.zero_grad(set_to_none=True)
    model(x, y)[1].backward()
    norms = [
        torch.sqrt(sum((p.grad.float() ** 2).sum() for p in b.parameters() if p.grad is not None)) for b in model.blocks
    ]
    model.zero_grad(set_to_none=True)
    return torch.stack(norms).cpu()


@torch.no_grad()
def scale_embeddings(model: GPT, std: float = 1.0) -> GPT:
    """Rescale the token (and learned position) embedding tables to standard deviation ``std``, in place.

    The control for ``gradient_norms_by_layer``: the GPT's initialisation draws embeddings of std 0.02, so
    the residual stream starts tiny; at ``std=1`` it starts at the scale a LayerNorm outputs."""
    for table in (model.tok_emb.weight, getattr(model.pos, "weight", None)):
        if table is not None:
            table.mul_(std / table.std())
    return model
