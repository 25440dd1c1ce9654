"""Chapter 01's long-range recall task: repeat the first token after a gap of distractors.

Used in chapter 01.

``recall_batch`` makes the sequences; ``RecallLSTM`` and ``recall_gpt`` are the two contestants; ``train_recall``
trains either with ``train.train``; ``recall_accuracy`` scores it on fresh sequences. ``train_runs`` trains the
chapter's ten models (both contestants at every gap in ``GAPS``); ``save_runs`` / ``load_runs`` write and read them
(``scripts/train_recall.py``, ``checkpoints/recall_models.*``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

from ..data.checkpoint_io import load_weights, provenance, save_tensors_and_record, tied_names
from ..utils.checks import check_choice, check_int
from ..utils.device import default_device, seed_everything
from ..models.configs import GPTConfig
from ..models.transformer import GPT
from ..utils.modes import eval_mode
from ..training.loop import TrainConfig, train
from ..checkpoints import CHECKPOINT_DIR


def recall_batch(
    batch_size: int, gap: int, n_symbols: int = 8, generator: torch.Generator | None = None, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences ``[key, d_1, ..., d_gap, QUERY]`` and their targets ``key``.

    ``key`` and the ``gap`` distractors are drawn uniformly from ``0 .. n_symbols-1``; ``QUERY = n_symbols``
    asks for the first token, so the vocabulary has ``n_symbols + 1`` ids. Returns ``x: (B, gap + 2)``
    and ``y: (B,)``, ``y == x[:, 0]``; guessing is right ``1 / n_symbols`` of the time.
    """
    check_int("batch_size", batch_size, min=1)
    check_int("gap", gap, min=0)
    check_int("n_symbols", n_symbols, min=2, note="one symbol is always right")
    body = torch.randint(0, n_symbols, (batch_size, gap + 1), generator=generator)  # key + distractors
    query = torch.full((batch_size, 1), n_symbols, dtype=torch.long)
    x = torch.cat([body, query], dim=1)  # (B, gap + 2)
    return x.to(device), x[:, 0].clone().to(device)


class RecallLSTM(nn.Module):
    """Embedding -> ``nn.LSTM`` -> Linear: ``idx: (B, T)`` -> logits ``(B, T, vocab_size)``."""

    def __init__(self, vocab_size: int, d_model: int = 32, d_hidden: int = 64):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.lstm = nn.LSTM(d_model, d_hidden, batch_first=True)  # PyTorch's fused loop (cuDNN on a GPU)
        self.head = nn.Linear(d_hidden, vocab_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.emb(idx))  # (B, T, d_hidden)
        return self.head(out)


def recall_gpt(gap: int, n_symbols: int = 8, d_model: int = 64, n_heads: int = 1, d_ff: int = 64) -> GPT:
    """A one-layer ``GPT`` with learned positions, sized for ``recall_batch(..., gap, n_symbols)``."""
    cfg = GPTConfig(
        vocab_size=n_symbols + 1,
        block_size=gap + 2,
        n_layers=1,
        n_heads=n_heads,
        d_model=d_model,
        d_ff=d_ff,
        positional="learned",
    )
    return GPT(cfg)


def _last_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out = model(x)
    return (out[0] if isinstance(out, tuple) else out)[:, -1]  # (B, vocab): the prediction at QUERY


def recall_loss(model: nn.Module, batch) -> torch.Tensor:
    """Cross-entropy of the prediction at the QUERY position against the key, for ``batch = (x: (B, T), y: (B,))``."""
    x, y = batch
    return F.cross_entropy(_last_logits(model, x).float(), y)


def train_recall(
    model: nn.Module,
    gap: int,
    steps: int = 150,
    batch_size: int = 32,
    lr: float = 3e-3,
    n_symbols: int = 8,
    seed: int = 0,
    progress: bool = True,
    desc: str = "",
) -> list[float]:
    """Train ``model`` (``RecallLSTM`` or ``recall_gpt``) with ``train.train``: Adam at a constant ``lr``, no
    warm-up, no clipping, on fresh batches; returns the losses."""
    gen = torch.Generator().manual_seed(seed)
    cfg = TrainConfig(
        steps=steps,
        lr=lr,
        warmup_steps=0,
        schedule="constant",
        weight_decay=0.0,
        betas=(0.9, 0.999),
        grad_clip=None,
        seed=seed,
        progress=progress,
        optimizer="adam",
    )
    hist = train(
        model,
        lambda step: recall_batch(batch_size, gap, n_symbols, gen),
        cfg,
        recall_loss,
        device=next(model.parameters()).device,
        desc=desc or f"gap {gap}",
    )
    return hist.train_loss


@torch.no_grad()
def recall_accuracy(model: nn.Module, gap: int, n: int = 1000, n_symbols: int = 8, seed: int = 1234) -> float:
    """Fraction of ``n`` fresh sequences (a seed unseen in training) whose first token is recalled."""
    device = next(model.parameters()).device
    x, y = recall_batch(n, gap, n_symbols, torch.Generator().manual_seed(seed), device)
    with eval_mode(model):
        return (_last_logits(model, x).argmax(-1) == y).float().mean().item()


GAPS = (4, 8, 16, 32, 64)
CONTESTANTS = ("LSTM", "attention")
# the chapter's budget: the same for both contestants at every gap
RECIPE = {"steps": 150, "batch_size": 32, "lr": 3e-3, "n_symbols": 8, "seed": 0}
CHECKPOINT = CHECKPOINT_DIR / "recall_models"


def make_contestant(name: str, gap: int, n_symbols: int = 8, seed: int = 0) -> nn.Module:
    """``RecallLSTM`` (``name="LSTM"``) or ``recall_gpt`` (``"attention"``), initialised from ``seed``."""
    check_choice("name", name, CONTESTANTS)
    seed_everything(seed)
    return RecallLSTM(n_symbols + 1) if name == "LSTM" else recall_gpt(gap, n_symbols)


def train_runs(gaps=GAPS, recipe: dict | None = None, device=None, progress: bool = True) -> dict:
    """Both contestants at every gap, each with ``recipe`` (``RECIPE``): ``{"models": {(name, gap): module},
    "losses": {(name, gap): [...]}, "recipe", "gaps", "seconds"}``."""
    recipe = {**RECIPE, **(recipe or {})}
    start, models, losses = time.perf_counter(), {}, {}
    for gap in gaps:
        for name in CONTESTANTS:
            model = make_contestant(name, gap, recipe["n_symbols"], recipe["seed"]).to(device or default_device())
            losses[name, gap] = train_recall(model, gap, progress=progress, desc=f"{name}, gap {gap}", **recipe)
            models[name, gap] = model.eval()
    return {
        "models": models,
        "losses": losses,
        "recipe": recipe,
        "gaps": list(gaps),
        "seconds": time.perf_counter() - start,
    }


def save_runs(runs: dict, stem: Path = CHECKPOINT) -> None:
    """``<stem>.safetensors`` (every model's weights, keys ``<name>.gap<gap>.<parameter>``) and ``<stem>.json``
    (recipe, gaps, every training loss, how long it took, on what)."""
    tensors = {}
    for (name, gap), model in runs["models"].items():
        tied = tied_names(model)
        tensors.update(
            {
                f"{name}.gap{gap}.{k}": v.detach().contiguous().cpu()
                for k, v in model.state_dict().items()
                if k not in tied
            }
        )
    record = {
        "recipe": runs["recipe"],
        "gaps": runs["gaps"],
        "train_seconds": round(runs["seconds"], 1),
        "losses": {f"{name}/{gap}": v for (name, gap), v in runs["losses"].items()},
        **provenance(),
    }
    save_tensors_and_record(stem, tensors, record)


def load_runs(device=None, stem: Path = CHECKPOINT) -> dict:
    """The committed runs, in ``train_runs``'s structure (models in eval mode on ``device``), plus ``"record"``."""
    record = json.loads(stem.with_suffix(".json").read_text())
    tensors = load_file(str(stem.with_suffix(".safetensors")), device="cpu")
    recipe, models, losses = record["recipe"], {}, {}
    for gap in record["gaps"]:
        for name in CONTESTANTS:
            prefix = f"{name}.gap{gap}."
            model = make_contestant(name, gap, recipe["n_symbols"], recipe["seed"])
            load_weights(
                model,
                {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)},
                device or default_device(),
            )
            models[name, gap], losses[name, gap] = model.eval(), record["losses"][f"{name}/{gap}"]
    return {
        "models": models,
        "losses": losses,
        "recipe": recipe,
        "gaps": record["gaps"],
        "seconds": record["train_seconds"],
        "record": record,
    }
