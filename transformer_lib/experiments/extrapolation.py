"""A small length-extrapolation experiment (chapter 04): train on short sequences, test on longer ones.

Used in chapter 04.

The task, "look back k": a sequence of random tokens; at every position ``t >= k`` the model must
predict the token it saw ``k`` positions earlier, ``x[t - k]``. The answer depends only on the
*relative* offset ``k``, never on the absolute position ``t``, so a model that knows relative
distance can solve it at any length; a model that memorised "what to do at position t" cannot
go past the positions it was trained on.

We train the same tiny ``GPT`` with each positional scheme on sequences of ``train_len`` tokens
and measure accuracy on sequences of ``train_len``, ``2 * train_len`` and ``4 * train_len`` (by default).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..data.checkpoint_io import load_weights, provenance, save_tensors_and_record, tied_names
from ..utils.checks import check_int, check_sequence
from ..utils.device import default_device
from ..training.losses import gpt_loss
from ..models.configs import GPTConfig
from ..models.transformer import GPT
from ..utils.modes import eval_mode
from ..training.loop import TrainConfig
from ..training.loop import train as train_loop
from .threads import torch_threads
from ..checkpoints import CHECKPOINT_DIR

IGNORE = -100  # targets with this value are skipped by the loss and the accuracy
POSITIONALS = ("none", "learned", "sinusoidal", "rope", "alibi")
SEEDS = (0, 1, 2)
# the chapter's trained models, written by scripts/train_extrapolation.py (``save_runs``), read by ``load_runs``
CHECKPOINT = CHECKPOINT_DIR / "extrapolation_models"


def lookback_batch(
    batch_size: int, length: int, vocab_size: int, offset: int, generator: torch.Generator | None = None, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random tokens and their "look back ``offset``" targets.

    Returns ``idx: (B, T)`` uniform in ``[0, vocab_size)`` and ``targets: (B, T)`` with
    ``targets[:, t] = idx[:, t - offset]`` for ``t >= offset`` and ``-100`` (ignored) before.
    """
    check_int("offset", offset, min=1, max=length - 1, note=f"below length={length}")
    check_int("vocab_size", vocab_size, min=2)
    idx = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, T)
    targets = torch.full_like(idx, IGNORE)
    targets[:, offset:] = idx[:, :-offset]
    return idx.to(device), targets.to(device)


@dataclass
class ExtrapolationConfig:
    """The experiment's settings: task, model size, training budget."""

    vocab_size: int = 16
    offset: int = 1  # k in "look back k" (k = 1: repeat the previous token)
    train_len: int = 32  # T_train: every training sequence has this length
    eval_factors: tuple = (1, 2, 4)  # evaluate at T_train, 2 T_train, 4 T_train
    n_layers: int = 2
    n_heads: int = 4
    d_model: int = 32
    steps: int = 300
    batch_size: int = 32
    lr: float = 5e-3
    eval_batches: int = 4
    seed: int = 0
    # GPT-2 initialises token embeddings at std 0.02 while the sinusoidal table's entries are of size ~0.7:
    # unscaled, the table drowns the tokens and training stalls at chance level for hundreds of steps.
    # Vaswani et al. scale the embeddings up (by sqrt(d_model)); we scale the table down to the embeddings' size.
    sinusoidal_scale: float = 0.02

    def __post_init__(self):
        check_int("offset", self.offset, min=1, max=self.train_len - 1, note=f"below train_len={self.train_len}")
        check_sequence("eval_factors", self.eval_factors, min_len=1, items=partial(check_int, min=1))

    @property
    def eval_lens(self) -> list[int]:
        return [f * self.train_len for f in self.eval_factors]


def make_model(positional: str, cfg: ExtrapolationConfig, device=None) -> GPT:
    """A tiny ``GPT`` whose position tables (learned, sinusoidal) cover the longest evaluation length.

    Only the first ``train_len`` rows of a learned table ever receive gradient. A sinusoidal table is
    multiplied by ``cfg.sinusoidal_scale`` (see ``ExtrapolationConfig``).
    """
    torch.manual_seed(cfg.seed)
    gpt_cfg = GPTConfig(
        vocab_size=cfg.vocab_size,
        block_size=max(cfg.eval_lens),
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_model=cfg.d_model,
        dropout=0.0,
        positional=positional,
    )
    model = GPT(gpt_cfg)
    if positional == "sinusoidal":
        model.pos.pe.mul_(cfg.sinusoidal_scale)  # a buffer, not a parameter: it stays fixed
    return model.to(device or default_device())


def train(model: GPT, cfg: ExtrapolationConfig, progress: bool = True, desc: str = "training") -> list[float]:
    """``train.train`` with Adam (no weight decay, so untrained table rows stay exactly at their init), a warm-up
    over the first 10% of the steps then cosine decay towards 0, on fresh batches of length ``train_len``.
    Returns the loss of every step."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(cfg.seed)
    tcfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup_steps=max(1, cfg.steps // 10),
        min_lr_ratio=0.0,
        weight_decay=0.0,
        betas=(0.9, 0.999),
        grad_clip=None,
        seed=cfg.seed,
        progress=progress,
        optimizer="adam",
    )

    def batch_fn(step):  # a fresh batch from the seeded generator
        return lookback_batch(cfg.batch_size, cfg.train_len, cfg.vocab_size, cfg.offset, gen)

    return train_loop(model, batch_fn, tcfg, gpt_loss, device=device, desc=desc).train_loss


@torch.no_grad()
def accuracy_by_position(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Fraction of correct argmax predictions at each position: ``(B, T, V), (B, T) -> (T,)``.

    Positions whose targets are all ignored (``-100``) give NaN.
    """
    valid = targets != IGNORE  # (B, T)
    correct = (logits.argmax(-1) == targets) & valid
    return correct.sum(0).double() / valid.sum(0).double()  # 0/0 -> NaN where nothing is scored


@torch.no_grad()
def evaluate(model: GPT, length: int, cfg: ExtrapolationConfig, seed: int = 1234) -> dict:
    """Loss and accuracy of ``model`` on ``cfg.eval_batches`` fresh batches of ``length`` tokens.

    Returns ``{"loss": float, "accuracy": float, "accuracy_beyond_train": float or nan,
    "by_position": (length,) tensor}``; ``accuracy_beyond_train`` scores positions ``>= train_len`` only.
    """
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    losses, by_pos = [], []
    with eval_mode(model):
        for _ in range(cfg.eval_batches):
            idx, targets = lookback_batch(cfg.batch_size, length, cfg.vocab_size, cfg.offset, gen, device)
            logits, loss = model(idx, targets)
            losses.append(loss.item())
            by_pos.append(accuracy_by_position(logits, targets).cpu())
    by_position = torch.stack(by_pos).mean(0)  # (T,), equal-sized batches
    scored = by_position[cfg.offset :]
    beyond = by_position[cfg.train_len :]
    return {
        "loss": sum(losses) / len(losses),
        "accuracy": scored.mean().item(),
        "accuracy_beyond_train": beyond.mean().item() if beyond.numel() else float("nan"),
        "by_position": by_position,
    }


def run_experiment(
    positionals=("none", "learned", "sinusoidal", "rope", "alibi"),
    cfg: ExtrapolationConfig | None = None,
    device=None,
    progress: bool = True,
) -> dict:
    """Train one model per positional scheme and evaluate each at every length in ``cfg.eval_lens``.

    Returns ``{positional: {"model": GPT, "losses": [...], "eval": {length: evaluate(...)}}}``.
    """
    cfg = cfg or ExtrapolationConfig()
    results = {}
    with torch_threads(1):  # also harmless on a GPU: only the CPU thread pool is changed
        for name in positionals:
            model = make_model(name, cfg, device)
            losses = train(model, cfg, progress, desc=f"positional={name}")
            results[name] = {
                "model": model,
                "losses": losses,
                "eval": {n: evaluate(model, n, cfg) for n in cfg.eval_lens},
            }
    return results


def run_seeds(
    positionals=("none", "learned", "sinusoidal", "rope", "alibi"),
    cfg: ExtrapolationConfig | None = None,
    seeds=(0, 1, 2),
    device=None,
    progress: bool = True,
) -> dict:
    """``run_experiment`` once per seed (``cfg`` with ``seed`` replaced). Returns ``{seed: run_experiment(...)}``."""
    cfg = cfg or ExtrapolationConfig()
    check_sequence("seeds", seeds, min_len=1, items=check_int)
    return {s: run_experiment(positionals, replace(cfg, seed=s), device, progress) for s in seeds}


def seed_summary(by_seed: dict, length: int, key: str = "accuracy") -> dict:
    """Mean and spread over seeds of ``eval[length][key]`` for each positional scheme.

    ``by_seed``: the output of ``run_seeds``. Returns ``{positional: {"mean", "std", "min", "max", "values"}}``;
    ``std`` is the sample standard deviation (``n - 1`` in the denominator; 0 for a single seed).
    """
    first = next(iter(by_seed.values()))
    out = {}
    for name in first:
        values = torch.tensor([runs[name]["eval"][length][key] for runs in by_seed.values()], dtype=torch.float64)
        std = values.std().item() if len(values) > 1 else 0.0
        out[name] = {
            "mean": values.mean().item(),
            "std": std,
            "min": values.min().item(),
            "max": values.max().item(),
            "values": values.tolist(),
        }
    return out


# ----------------------------------------------------------------------------- the committed runs
def train_runs(cfg: ExtrapolationConfig | None = None, seeds=SEEDS, device=None, progress: bool = True) -> dict:
    """What chapter 04 shows, trained: ``run_seeds`` over ``POSITIONALS`` and one more sinusoidal model with the
    table at full size (``sinusoidal_scale=1``, seed ``cfg.seed``). Returns ``{"by_seed": ..., "unscaled": ...,
    "config": cfg, "seconds": float}``; ``load_runs`` gives the same structure from the committed files."""
    cfg = cfg or ExtrapolationConfig()
    start = time.perf_counter()
    by_seed = run_seeds(POSITIONALS, cfg, seeds, device, progress)
    unscaled = run_experiment(("sinusoidal",), replace(cfg, sinusoidal_scale=1.0), device, progress)["sinusoidal"]
    return {"by_seed": by_seed, "unscaled": unscaled, "config": cfg, "seconds": time.perf_counter() - start}


def _state(model: GPT, prefix: str) -> dict[str, torch.Tensor]:
    tied = tied_names(model)  # GPT's lm_head.weight is tok_emb.weight: stored once
    return {prefix + k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}


def save_runs(runs: dict, stem: Path = CHECKPOINT) -> None:
    """Write ``<stem>.safetensors`` (every model's weights, and each learned table as initialised) and
    ``<stem>.json`` (config, seeds, every training loss, how long it took, on what)."""
    cfg, by_seed = runs["config"], runs["by_seed"]
    tensors = {}
    for seed, results in by_seed.items():
        for name, r in results.items():
            tensors.update(_state(r["model"], f"seed{seed}.{name}."))
        init = make_model("learned", replace(cfg, seed=seed), device="cpu").pos.weight  # same seed, same draw
        tensors[f"seed{seed}.learned_init"] = init.detach().contiguous()
    record = {
        "config": asdict(cfg),
        "seeds": list(by_seed),
        "positionals": list(next(iter(by_seed.values()))),
        "losses": {f"{seed}/{name}": r["losses"] for seed, res in by_seed.items() for name, r in res.items()},
        "unscaled_losses": runs["unscaled"]["losses"],
        "train_seconds": round(runs["seconds"], 1),
        **provenance(threads=1),
    }
    save_tensors_and_record(stem, tensors, record)


def load_runs(device=None, stem: Path = CHECKPOINT) -> dict:
    """The committed runs, evaluated now: ``{"by_seed": {seed: {positional: {"model", "losses", "eval",
    "initial_table" (learned only)}}}, "unscaled": {"losses"}, "config", "record"}``, the structure of
    ``train_runs``. Every accuracy is measured here, on this machine, by ``evaluate``."""
    record = json.loads(stem.with_suffix(".json").read_text())
    tensors = load_file(str(stem.with_suffix(".safetensors")), device="cpu")
    cfg = ExtrapolationConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in record["config"].items()})
    by_seed = {}
    for seed in record["seeds"]:
        scfg, results = replace(cfg, seed=seed), {}
        for name in record["positionals"]:
            prefix = f"seed{seed}.{name}."
            model = make_model(name, scfg, device="cpu")
            load_weights(
                model,
                {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)},
                device or default_device(),
            )
            model.eval()
            results[name] = {
                "model": model,
                "losses": record["losses"][f"{seed}/{name}"],
                "eval": {n: evaluate(model, n, scfg) for n in scfg.eval_lens},
            }
        results["learned"]["initial_table"] = tensors[f"seed{seed}.learned_init"]
        by_seed[seed] = results
    return {"by_seed": by_seed, "unscaled": {"losses": record["unscaled_losses"]}, "config": cfg, "record": record}
