"""Chapter 12's first run: two pre-training objectives on one small model, trained for the same steps.

Used in chapter 12.

The same tiny character Transformer (chapter 06's GPT shape: 2 layers, d_model 64, rotary positions) is trained on
Shakespeare (``ObjectiveConfig``, ``train_objective``) once with next-token prediction (causal mask on,
``objectives.next_token_targets``' loss at every position) and once with masked language modelling (causal mask
off, ``objectives.mlm_mask``: 15% of positions, 80/10/10). The vocabulary is the corpus's characters plus one
``[MASK]`` id (``mask_id``), the same for both. On held-out windows of the validation plays, ``blank_accuracy`` asks
for the middle character with both sides given (the MLM model sees the blank as ``[MASK]``; the causal model can
only read the left side) and ``next_accuracy`` for the character after the window (the MLM model sees a ``[MASK]``
there). ``experiments.fine_tuning`` trains both models with its runs and commits them in its checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..data.corpus import get_batch, shakespeare_corpus
from ..models.configs import GPTConfig
from ..models.transformer import GPT
from ..utils.modes import eval_mode
from ..data.objectives import mlm_mask
from ..training.loop import TrainConfig, evaluate_loss, train
from ..models.variants import set_causal
from .threads import torch_threads
from ..utils.checks import check_choice

OBJECTIVES = ("next-token", "mlm")


@dataclass
class ObjectiveConfig:
    """The tiny character Transformer both objectives train (chapter 06's shape) and their shared budget."""

    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    block_size: int = 32
    batch_size: int = 32
    steps: int = 1500  # at 400 steps the MLM model had not yet learned to use the right-hand side (blank 44% vs 43%)
    lr: float = 5e-3
    warmup_steps: int = 40
    eval_batches: int = 4
    seed: int = 0
    positional: str = "rope"


def mask_id() -> int:
    """The ``[MASK]`` id: one past the corpus's characters."""
    return shakespeare_corpus().tokenizer.vocab_size


def make_lm(objective: str, cfg: ObjectiveConfig = ObjectiveConfig()) -> GPT:
    """The tiny Transformer of ``cfg`` (vocabulary: the characters and ``[MASK]``), initialised from ``cfg.seed``;
    causal for ``"next-token"``, bidirectional for ``"mlm"``."""
    check_choice("objective", objective, OBJECTIVES)
    torch.manual_seed(cfg.seed)
    model = GPT(
        GPTConfig(
            vocab_size=mask_id() + 1,
            block_size=cfg.block_size,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            d_model=cfg.d_model,
            positional=cfg.positional,
        )
    )
    return set_causal(model, objective == "next-token")


def objective_batch(objective: str, data: torch.Tensor, cfg: ObjectiveConfig, generator: torch.Generator):
    """``(inputs, targets)`` ``(B, T)``: next characters, or BERT's masking with labels at the chosen positions."""
    x, y = get_batch(data, cfg.block_size, cfg.batch_size, generator)
    if objective == "next-token":
        return x, y
    m = mlm_mask(x, mask_id(), mask_id() + 1, generator=generator)
    return m.input_ids, m.labels


def train_objective(objective: str, cfg: ObjectiveConfig = ObjectiveConfig(), progress: bool = True, device=None):
    """Train ``make_lm(objective)`` for ``cfg.steps`` steps; returns ``(model, History)`` (its validation loss is
    the objective's own, on masked or shifted validation windows)."""
    corpus = shakespeare_corpus()
    model = make_lm(objective, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    vgen = torch.Generator().manual_seed(1234)
    val = [objective_batch(objective, corpus.val, cfg, vgen) for _ in range(cfg.eval_batches)]
    tcfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        weight_decay=0.0,
        eval_every=max(1, cfg.steps // 4),
        seed=cfg.seed,
        progress=progress,
    )
    with torch_threads(1):
        hist = train(
            model,
            lambda step: objective_batch(objective, corpus.train, cfg, gen),
            tcfg,
            eval_fn=lambda m: evaluate_loss(m, val),
            device=device,
            desc=objective,
        )
    return model, hist


def held_out_windows(n: int = 2048, length: int = 33, seed: int = 99) -> torch.Tensor:
    """``(n, length)`` windows of the validation plays (never trained on), drawn with ``seed``."""
    data = shakespeare_corpus().val
    starts = torch.randint(data.numel() - length, (n,), generator=torch.Generator().manual_seed(seed))
    return data[starts[:, None] + torch.arange(length)]


@torch.no_grad()
def blank_accuracy(model: GPT, objective: str, windows: torch.Tensor) -> float:
    """Fill the blank at the middle of each ``(n, L)`` window: the MLM model reads the window with ``[MASK]``
    there (both sides), the causal model the characters before it (the left side is all it can use). The share of
    exact characters."""
    p = windows.shape[1] // 2
    with eval_mode(model):
        if objective == "mlm":
            x = windows.clone()
            x[:, p] = mask_id()
            logits = model(x)[0][:, p]
        else:
            logits = model(windows[:, :p])[0][:, -1]
    return (logits.argmax(-1) == windows[:, p]).float().mean().item()


@torch.no_grad()
def next_accuracy(model: GPT, objective: str, windows: torch.Tensor) -> float:
    """Continue each ``(n, L)`` window's first ``L - 1`` characters by one: the causal model predicts after them,
    the MLM model fills a ``[MASK]`` put after them. The share of exact characters."""
    with eval_mode(model):
        if objective == "mlm":
            x = windows.clone()
            x[:, -1] = mask_id()
            logits = model(x)[0][:, -1]
        else:
            logits = model(windows[:, :-1])[0][:, -1]
    return (logits.argmax(-1) == windows[:, -1]).float().mean().item()
