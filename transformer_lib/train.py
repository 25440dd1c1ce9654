"""Training, evaluation, decoding and saving, shared by the book's two trained models and its chapters.

* ``train``: AdamW, linear warm-up then cosine decay, gradient clipping, a step count and/or a wall-clock budget,
  a ``tqdm`` bar; returns the loss history for plotting. Seeded: the same call gives the same numbers on CPU.
* ``evaluate_loss``; ``greedy_decode``/``beam_search``/``translate`` and ``exact_match`` for the translator.
* ``save_weights``/``load_weights``: safetensors only (no pickle), written atomically.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save

from .device import default_device, seed_everything

Batch = tuple  # a tuple of tensors, or any object with .to(device)


# ----------------------------------------------------------------------------- loss functions
def gpt_loss(model: nn.Module, batch) -> torch.Tensor:
    """Next-token cross-entropy of a ``GPT`` on ``(x: (B, T), y: (B, T))``."""
    x, y = batch
    return model(x, y)[1]


def seq2seq_loss(model: nn.Module, batch) -> torch.Tensor:
    """Teacher-forced cross-entropy of a ``Transformer`` on a ``TranslationBatch``; padding is ignored."""
    pad = model.cfg.pad_id
    logits = model(batch.src, batch.tgt_in, tgt_mask=batch.tgt_in != pad)  # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=pad)


# ----------------------------------------------------------------------------- the loop
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
    stopped_by: str = "steps"  # or "time"

    def to_dict(self) -> dict:
        return asdict(self)


def lr_at(step: int, cfg: TrainConfig, progress: float | None = None) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine from ``lr`` down to ``lr * min_lr_ratio``.

    ``progress`` in [0, 1] overrides ``step / steps`` for the cosine (``train`` passes the larger of the step and
    time fractions when ``max_seconds`` is set, so a time-limited run still ends at the low learning rate).
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if progress is None:
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    low = cfg.lr * cfg.min_lr_ratio
    return low + 0.5 * (cfg.lr - low) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the >= 2-D weights (matrices, embeddings) and none on biases and norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def to_device(batch, device):
    """Move a batch (a tuple/list of tensors, or an object with ``.to``) to ``device``."""
    if isinstance(batch, (tuple, list)):
        return type(batch)(b.to(device) for b in batch)
    return batch.to(device)


_to = to_device  # older name, used by pruning.py


def train(model: nn.Module, batch_fn: Callable[[int], Batch], cfg: TrainConfig,
          loss_fn: Callable[[nn.Module, Batch], torch.Tensor] = gpt_loss,
          eval_fn: Callable[[nn.Module], float] | None = None, device=None) -> History:
    """Train ``model`` in place and return its ``History``.

    Args:
        batch_fn: ``step -> batch`` (tensors on any device; moved to the model's). Make it deterministic in
            ``step`` (e.g. a generator seeded once) and the run is reproducible.
        loss_fn: ``(model, batch) -> scalar loss``; ``gpt_loss`` or ``seq2seq_loss``.
        eval_fn: ``model -> validation loss``, called every ``cfg.eval_every`` steps and at the end
            (the model is put in eval mode and back).
        device: default ``default_device()`` (CUDA when present).
    Stops after ``cfg.steps`` steps or ``cfg.max_seconds`` seconds, whichever comes first.
    """
    if cfg.steps < 1 or cfg.warmup_steps < 0 or cfg.lr <= 0:
        raise ValueError(f"need steps >= 1, warmup_steps >= 0, lr > 0; got {cfg.steps}, {cfg.warmup_steps}, {cfg.lr}")
    device = torch.device(device) if device is not None else default_device()
    seed_everything(cfg.seed)  # dropout and anything else drawing from the global generator
    model.to(device).train()
    opt = make_optimizer(model, cfg)
    hist = History()
    from tqdm.auto import tqdm
    bar = tqdm(total=cfg.steps, disable=not cfg.progress, desc="training", leave=False)
    start = time.perf_counter()

    def evaluate(step):
        hist.val_step.append(step)
        hist.val_loss.append(float(eval_fn(model)))
        model.train()

    for step in range(cfg.steps):
        elapsed = time.perf_counter() - start
        if cfg.max_seconds is not None and elapsed >= cfg.max_seconds:
            hist.stopped_by = "time"
            break
        if eval_fn is not None and step > 0 and step % cfg.eval_every == 0:
            evaluate(step)
        frac = None if cfg.max_seconds is None else max(
            (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps), elapsed / cfg.max_seconds)
        lr = lr_at(step, cfg, frac)
        for group in opt.param_groups:
            group["lr"] = lr
        loss = loss_fn(model, to_device(batch_fn(step), device))
        if not torch.isfinite(loss):
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
    if eval_fn is not None:
        evaluate(hist.steps_done)
    bar.close()
    hist.seconds = time.perf_counter() - start
    model.eval()
    return hist


@torch.no_grad()
def evaluate_loss(model: nn.Module, batches: Iterable[Batch], loss_fn=gpt_loss) -> float:
    """Mean of ``loss_fn`` over ``batches`` (equal-sized batches: the mean per token), in eval mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses = [float(loss_fn(model, to_device(b, device))) for b in batches]
    model.train(was_training)
    if not losses:
        raise ValueError("batches must hold at least one batch, got none")
    return sum(losses) / len(losses)


# ----------------------------------------------------------------------------- decoding (encoder-decoder)
@torch.no_grad()
def greedy_decode(model: nn.Module, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int = 32) -> torch.Tensor:
    """Most likely next token at each step (PAD and BOS excluded). ``src: (B, S)`` -> ``(B, <= max_len)`` ids,
    without BOS, padded with ``pad_id`` after EOS."""
    pad = model.cfg.pad_id
    src_mask = src != pad  # (B, S)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(out, memory, src_mask)[:, -1]  # (B, V)
        logits[:, [pad, bos_id]] = float("-inf")  # never valid outputs
        nxt = logits.argmax(-1).masked_fill(done, pad)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return out[:, 1:]


@torch.no_grad()
def beam_search(model: nn.Module, src: torch.Tensor, bos_id: int, eos_id: int, beam_size: int = 4,
                max_len: int = 32, length_penalty: float = 0.0) -> torch.Tensor:
    """Keep the ``beam_size`` most likely prefixes per source; return each source's best finished one.

    Score = sum of log-probabilities / length**``length_penalty`` (0: plain sum). ``src: (B, S)`` ->
    ``(B, <= max_len)`` ids like ``greedy_decode``. ``beam_size=1`` equals greedy decoding.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    pad, (B, S), K = model.cfg.pad_id, src.shape, beam_size
    src_mask = src != pad
    memory = model.encode(src, src_mask)  # (B, S, d)
    memory = memory.repeat_interleave(K, 0)  # (B*K, S, d): the K beams of source b are rows b*K..b*K+K-1
    src_mask = src_mask.repeat_interleave(K, 0)
    seqs = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src.device)
    scores = torch.zeros(B, K, device=src.device)
    scores[:, 1:] = float("-inf")  # start from one live beam per source
    done = torch.zeros(B * K, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(seqs, memory, src_mask)[:, -1].float()  # (B*K, V)
        logits[:, [pad, bos_id]] = float("-inf")  # never valid outputs
        logp, V = F.log_softmax(logits, dim=-1), logits.shape[-1]
        # a finished beam can only be extended by PAD, at no cost
        frozen = torch.full_like(logp, float("-inf"))
        frozen[:, pad] = 0.0
        logp = torch.where(done[:, None], frozen, logp)
        cand = (scores.view(B * K, 1) + logp).view(B, K * V)  # (B, K*V)
        scores, flat = cand.topk(K, dim=-1)  # (B, K)
        beam, tok = flat // V, flat % V
        rows = (torch.arange(B, device=src.device)[:, None] * K + beam).view(-1)  # parent rows
        seqs = torch.cat([seqs[rows], tok.view(-1, 1)], dim=1)
        done = done[rows] | (tok.view(-1) == eos_id)
        if done.all():
            break
    lengths = ((seqs[:, 1:] != pad).sum(-1)).clamp(min=1).float().view(B, K)
    best = (scores / lengths ** length_penalty).argmax(-1)  # (B,)
    return seqs.view(B, K, -1)[torch.arange(B, device=src.device), best, 1:]


def translate(model: nn.Module, src_texts: Sequence[str], src_tok, tgt_tok, beam_size: int = 1,
              max_len: int = 32, batch_size: int = 256) -> list[str]:
    """Translate texts with a trained ``Transformer``; greedy when ``beam_size == 1``, else beam search."""
    from .data import pad_sequences
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(src_texts), batch_size):
        src = pad_sequences([src_tok.encode(t) for t in src_texts[i: i + batch_size]], src_tok.pad_id).to(device)
        if beam_size == 1:
            ids = greedy_decode(model, src, tgt_tok.bos_id, tgt_tok.eos_id, max_len)
        else:
            ids = beam_search(model, src, tgt_tok.bos_id, tgt_tok.eos_id, beam_size, max_len)
        for row in ids.tolist():
            out.append(tgt_tok.decode(row[: row.index(tgt_tok.eos_id)] if tgt_tok.eos_id in row else row))
    model.train(was_training)
    return out


def exact_match(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of predictions equal to their reference, character for character."""
    if len(predictions) != len(references) or not references:
        raise ValueError(f"predictions and references must be non-empty and equally long, got "
                         f"{len(predictions)} and {len(references)}")
    return sum(p == r for p, r in zip(predictions, references)) / len(references)


# ----------------------------------------------------------------------------- saving
def _current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``); elsewhere by the
    set-and-restore idiom, which leaves it changed for an instant."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: readers see the old
    file or the new one, never half a file; on error the temporary file is removed.

    Permissions: ``mkstemp`` creates its file as 0600, which the rename would carry over. Instead, an overwritten
    file keeps its own mode, and a new file gets the mode ``open()`` would give it (0666 minus the umask)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_current_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _tied_names(model: nn.Module) -> dict[str, str]:
    """``{alias: kept name}`` for state-dict entries sharing storage (e.g. GPT's lm_head.weight -> tok_emb.weight)."""
    seen, tied = {}, {}
    for name, t in model.state_dict(keep_vars=True).items():
        key = (t.data_ptr(), t.shape, t.stride())
        if key in seen:
            tied[name] = seen[key]
        else:
            seen[key] = name
    return tied


def save_weights(model: nn.Module, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Save the state dict as safetensors, atomically. Tied copies are dropped (safetensors refuses shared
    tensors) and re-tied by ``load_weights``; ``metadata`` (str -> str) goes into the file's header."""
    tied = _tied_names(model)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}
    header = dict(metadata or {})
    header["tied"] = ",".join(f"{a}={b}" for a, b in tied.items())
    atomic_write_bytes(path, save(tensors, metadata=header))


def load_weights(model: nn.Module, source: str | Path | dict, device=None) -> nn.Module:
    """Load a ``save_weights`` file (or its already-read ``{name: tensor}``) into ``model``, strictly (every
    parameter present, none extra), re-tying tied weights; then move it to ``device`` if given."""
    tensors = dict(source) if isinstance(source, dict) else load_file(str(source), device="cpu")
    for alias, name in _tied_names(model).items():
        if alias not in tensors and name in tensors:
            tensors[alias] = tensors[name]  # copying into a tied parameter twice is harmless
    model.load_state_dict(tensors, strict=True)
    if device is not None:
        model.to(device)
    return model
