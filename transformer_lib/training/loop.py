"""The one training loop of the library, used by the book's two trained models and by every chapter experiment.

Used in chapters 06, 08 and 11.

* ``train``: AdamW (or Adam), linear warm-up then cosine decay (or a constant rate), gradient clipping, a step
  count and/or a wall-clock budget, a ``tqdm`` bar; returns the loss history for plotting. Seeded: the same call
  gives the same numbers on CPU. A non-finite loss raises, or (``on_nonfinite="stop"``) ends the run quietly.
* ``evaluate_loss``: the mean loss over fixed batches, in eval mode.
Loss functions live in ``losses.py``; checkpoint files in ``checkpoint_io.py``; decoding in ``seq2seq.py``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

import torch
import torch.nn as nn

from ..utils.checks import check_bool, check_choice, check_int, check_number, check_sequence, check_type
from ..utils.device import default_device, seed_everything, to_device
from .losses import gpt_loss
from ..utils.modes import eval_mode

OPTIMIZERS = ("adamw", "adam")  # adam: weight decay as an L2 term in the gradient (torch.optim.Adam)
SCHEDULES = ("cosine", "constant")  # after the linear warm-up
ON_NONFINITE = ("raise", "stop")


@dataclass
class TrainConfig:
    steps: int = 1000  # optimizer steps (the schedule's length)
    lr: float = 1e-3  # peak learning rate
    warmup_steps: int = 100  # linear warm-up from 0
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    weight_decay: float = 0.1  # on matrices only (not biases, norms)
    betas: tuple[float, float] = (0.9, 0.99)
    grad_clip: float | None = 1.0  # max global gradient norm
    max_seconds: float | None = None  # wall-clock budget; also shortens the schedule (see lr_at)
    eval_every: int = 100  # steps between calls of eval_fn
    seed: int = 0
    progress: bool = True  # tqdm bar
    optimizer: str = "adamw"  # one of OPTIMIZERS
    schedule: str = "cosine"  # one of SCHEDULES
    on_nonfinite: str = "raise"  # "stop": a NaN/inf loss ends the run (History.stopped_by == "nonfinite")

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Raise, naming the field, unless the choices are known, ``lr`` is a finite number > 0 and ``grad_clip`` one
        or None (``clip_grad_norm_`` with 0 zeroes every gradient, with a negative norm it flips them: ascent).
        ``train`` calls it again: a dataclass can be changed after it is made."""
        for name, allowed in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES), ("on_nonfinite", ON_NONFINITE)):
            check_choice(name, getattr(self, name), allowed)
        check_number("lr", self.lr, min=0, min_open=True, note="the peak learning rate")
        check_int("steps", self.steps, min=1)
        check_int("warmup_steps", self.warmup_steps, min=0)
        check_int("eval_every", self.eval_every, min=1)
        check_int("seed", self.seed)
        check_number("min_lr_ratio", self.min_lr_ratio, 0, 1)
        check_number("weight_decay", self.weight_decay, min=0)
        check_number("max_seconds", self.max_seconds, min=0, min_open=True, optional="no time limit")
        check_bool("progress", self.progress)
        check_number(
            "grad_clip", self.grad_clip, min=0, min_open=True, note="max gradient norm", optional="no clipping"
        )


@dataclass
class History:
    """What a run did. ``train_loss[i]`` was measured at ``step[i]``; ``val_loss[j]`` at ``val_step[j]``."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    steps_done: int = 0
    seconds: float = 0.0  # wall time of the loop, evaluations included
    stopped_by: str = "steps"  # or "time", or "nonfinite" (a NaN/inf loss with on_nonfinite="stop")

    def to_dict(self) -> dict:
        return asdict(self)


def lr_at(step: int, cfg: TrainConfig, progress: float | None = None) -> float:
    """Linear warm-up over ``warmup_steps``, then (``schedule="cosine"``) cosine from ``lr`` down to
    ``lr * min_lr_ratio``, or (``schedule="constant"``) ``lr``.

    ``progress`` in [0, 1] overrides ``step / steps`` for the cosine (``train`` passes the larger of the step and
    time fractions when ``max_seconds`` is set, so a time-limited run still ends at the low learning rate).
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    if progress is None:
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    low = cfg.lr * cfg.min_lr_ratio
    return low + 0.5 * (cfg.lr - low) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """``cfg.optimizer`` with weight decay on the >= 2-D weights (matrices, embeddings) and none on biases and
    norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return optimizer(groups, lr=cfg.lr, betas=cfg.betas)


def _step_lr(step: int, cfg: TrainConfig, elapsed: float) -> float:
    """The learning rate of ``step``; with a time budget the cosine follows the larger of step and time fractions."""
    frac = (
        None
        if cfg.max_seconds is None
        else max((step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps), elapsed / cfg.max_seconds)
    )
    return lr_at(step, cfg, frac)


def train(
    model: nn.Module,
    batch_fn: Callable[[int], object],
    cfg: TrainConfig,
    loss_fn: Callable[[nn.Module, object], torch.Tensor] = gpt_loss,
    eval_fn: Callable[[nn.Module], float] | None = None,
    device=None,
    desc: str = "training",
) -> History:
    """Train ``model`` in place and return its ``History``; the model is left in eval mode.

    Args:
        batch_fn: ``step -> batch`` (a tuple of tensors or an object with ``.to``, on any device; moved to the
            model's). Make it deterministic in ``step`` (e.g. a generator seeded once) and the run is reproducible.
        loss_fn: ``(model, batch) -> scalar loss``; e.g. ``losses.gpt_loss`` or ``losses.seq2seq_loss``.
        eval_fn: ``model -> validation loss``, called in eval mode every ``cfg.eval_every`` steps and at the end
            (a run stopped by a non-finite loss is not evaluated at the end).
        device: default ``default_device()`` (CUDA when present).
        desc: the progress bar's label.
    Stops after ``cfg.steps`` steps, ``cfg.max_seconds`` seconds, or (``on_nonfinite="stop"``) a NaN/inf loss.
    """
    check_type("model", model, nn.Module, expected="an nn.Module")
    check_type("batch_fn", batch_fn, methods=("__call__",), expected="a function step -> batch")
    check_type("cfg", cfg, TrainConfig).check()
    check_type("loss_fn", loss_fn, methods=("__call__",), expected="a function (model, batch) -> loss")
    check_type("eval_fn", eval_fn, methods=("__call__",), expected="a function model -> loss", optional=True)
    from tqdm.auto import tqdm

    device = torch.device(device) if device is not None else default_device()
    seed_everything(cfg.seed)  # dropout and anything else drawing from the global generator
    model.to(device).train()
    opt, hist = make_optimizer(model, cfg), History()
    bar = tqdm(total=cfg.steps, disable=not cfg.progress, desc=desc, leave=False)
    start = time.perf_counter()

    def evaluate(step):
        hist.val_step.append(step)
        with eval_mode(model):
            hist.val_loss.append(float(eval_fn(model)))

    for step in range(cfg.steps):
        elapsed = time.perf_counter() - start
        if cfg.max_seconds is not None and elapsed >= cfg.max_seconds:
            hist.stopped_by = "time"
            break
        if eval_fn is not None and step > 0 and step % cfg.eval_every == 0:
            evaluate(step)
        lr = _step_lr(step, cfg, elapsed)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, to_device(batch_fn(step), device))
        if not torch.isfinite(loss):
            if cfg.on_nonfinite == "stop":
                hist.stopped_by = "nonfinite"
                break
            raise FloatingPointError(f"loss became {loss.item()} at step {step} (lr={lr:.3g}); lower lr or check data")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        hist.step.append(step)
        hist.train_loss.append(loss.item())
        hist.lr.append(lr)
        hist.steps_done = step + 1
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    if eval_fn is not None and hist.stopped_by != "nonfinite":
        evaluate(hist.steps_done)
    bar.refresh()  # the last update may have been rate-limited: without this, a built page keeps "141/150"
    bar.close()
    hist.seconds = time.perf_counter() - start
    model.eval()
    return hist


@torch.no_grad()
def evaluate_loss(model: nn.Module, batches: Iterable, loss_fn=gpt_loss) -> float:
    """Mean of ``loss_fn`` over ``batches`` (equal-sized batches: the mean per token), in eval mode."""
    device = next(model.parameters()).device
    with eval_mode(model):
        losses = [float(loss_fn(model, to_device(b, device))) for b in batches]
    check_sequence("batches", losses, min_len=1, note="batches to average")
    return sum(losses) / len(losses)
