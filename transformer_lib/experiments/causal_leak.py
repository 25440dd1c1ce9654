"""Chapter 06's causal-mask experiment: the leak test (``future_sensitivity``: change the future, watch the
past), and a tiny character GPT trained with or without its causal mask (``train_char_gpt``), scored where no
mask can help (``last_position_loss``) and by how many of the words it writes are real words of the training
text (``known_word_share``). The mask is switched by ``variants.set_causal``.
Training the pair takes more CPU time than chapter 06's page can afford: ``scripts/train_causal_leak.py`` trains
it with ``CausalConfig()`` into ``checkpoints/causal_leak_models.*``; the page loads it (``load_runs``) and
measures every loss and sample again.

Used in chapters 05 and 06.
"""

from __future__ import annotations

import json
import re
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from ..data.checkpoint_io import load_weights, provenance, save_tensors_and_record, tied_names
from ..data.corpus import get_batch, shakespeare_corpus
from ..utils.device import default_device
from ..models.configs import GPTConfig
from ..models.transformer import GPT
from ..utils.modes import eval_mode
from ..serving.generation import generate
from ..training.loop import History, TrainConfig, evaluate_loss, train
from ..models.variants import set_causal
from .threads import torch_threads
from ..checkpoints import CHECKPOINT_DIR
from ..utils.checks import check_int, check_tensor


@torch.no_grad()
def future_sensitivity(model: GPT, idx: torch.Tensor, position: int, seed: int = 0) -> torch.Tensor:
    """The leak test. Replace every token *after* ``position`` by random ones and return, for each position
    ``t``, the largest absolute change of the logits there: ``(T,)``.

    With a working causal mask the entries ``t <= position`` are exactly 0: the past cannot see the future.
    """
    check_tensor("idx", idx, ("B", "T"))
    check_int("position", position, min=0, max=idx.shape[1] - 2, note="a position with a later one to change")
    gen = torch.Generator().manual_seed(seed)
    changed = idx.clone()
    future = torch.randint(0, model.cfg.vocab_size, changed[:, position + 1 :].shape, generator=gen)
    changed[:, position + 1 :] = future.to(idx.device)
    a, b = model(idx)[0].float(), model(changed)[0].float()  # (B, T, V)
    return (a - b).abs().amax(dim=(0, 2)).cpu()  # (T,)


@dataclass
class CausalConfig:
    """A tiny character GPT for the with/without-mask comparison. Rotary positions (chapter 04) make "read the
    next position" easy to learn, so the unmasked model finds the copying shortcut within the budget."""

    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    block_size: int = 32
    batch_size: int = 32
    steps: int = 300
    lr: float = 5e-3
    warmup_steps: int = 30
    eval_batches: int = 4
    seed: int = 0
    positional: str = "rope"


NAMES = {True: "with causal mask", False: "without causal mask"}  # the two runs, as the page names them
CHECKPOINT = CHECKPOINT_DIR / "causal_leak_models"


def causal_val_batches(cfg: CausalConfig) -> list:
    gen = torch.Generator().manual_seed(1234)
    return [get_batch(shakespeare_corpus().val, cfg.block_size, 32, gen) for _ in range(cfg.eval_batches)]


def make_model(causal: bool, cfg: CausalConfig = CausalConfig()) -> GPT:
    """The tiny character GPT of ``cfg``, initialised from ``cfg.seed``, its causal mask on or off."""
    torch.manual_seed(cfg.seed)
    model = GPT(
        GPTConfig(
            vocab_size=shakespeare_corpus().tokenizer.vocab_size,
            block_size=cfg.block_size,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            d_model=cfg.d_model,
            positional=cfg.positional,
        )
    )
    return set_causal(model, causal)


def train_char_gpt(causal: bool, cfg: CausalConfig = CausalConfig(), progress: bool = True, device=None):
    """Train a tiny GPT on Shakespeare with (``causal=True``) or without its causal mask.

    Returns ``(model, history)``; ``history.val_loss`` is measured the way the model was trained (so an
    unmasked model is evaluated unmasked too, as a careless training script would).
    """
    corpus = shakespeare_corpus()
    model = make_model(causal, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    val = causal_val_batches(cfg)
    tcfg = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        weight_decay=0.0,
        eval_every=max(1, cfg.steps // 6),
        seed=cfg.seed,
        progress=progress,
    )
    with torch_threads(1):  # a model this small trains as fast on one thread, and far faster on a busy machine
        hist = train(
            model,
            lambda step: get_batch(corpus.train, cfg.block_size, cfg.batch_size, gen),
            tcfg,
            eval_fn=lambda m: evaluate_loss(m, val),
            device=device,
        )
    return model, hist


@torch.no_grad()
def last_position_loss(model: GPT, batches) -> float:
    """Cross-entropy at the *last* position of each window only: there the next character is not in the input,
    so no mask or lack of one can help. ``batches``: ``(x, y)`` pairs of ``(B, T)``."""
    device = next(model.parameters()).device
    with eval_mode(model):
        losses = [
            F.cross_entropy(model(x.to(device))[0][:, -1].float(), y[:, -1].to(device)).item() for x, y in batches
        ]
    return sum(losses) / len(losses)


def word_set(text: str) -> set[str]:
    """The distinct words of ``text`` (runs of letters, lower-cased): e.g. the vocabulary of the training plays."""
    return set(re.findall(r"[a-z]+", text.lower()))


def known_word_share(text: str, vocabulary: set[str]) -> float:
    """The fraction of ``text``'s words (runs of letters, lower-cased, repeats counted) found in ``vocabulary``:
    1.0 when every word is a real word of the training text, lower for invented ones. 0.0 for a text without
    words."""
    words = re.findall(r"[a-z]+", text.lower())
    return sum(w in vocabulary for w in words) / len(words) if words else 0.0


def fit_text(text: str, width: int = 100, keep: int = 10) -> str:
    """``text`` made to fit a column of ``width`` characters, for printing a sample: a run of one character longer
    than ``2 * keep`` is cut to its first ``keep`` and its length (``"IIIIIIIIII... (161 x 'I')"``), then a line
    still wider than ``width`` is wrapped. A model that repeats one character writes such runs."""
    text = re.sub(
        rf"(.)\1{{{2 * keep},}}", lambda m: f"{m.group(1) * keep}... ({len(m.group(0))} x {m.group(1)!r})", text
    )
    return "\n".join(textwrap.fill(line, width) if len(line) > width else line for line in text.split("\n"))


@torch.no_grad()
def sample_texts(
    model: GPT, tokenizer, prompt: str, max_new_tokens: int = 160, seeds=(0,), temperature: float = 0.8
) -> list[str]:
    """One sampled continuation of ``prompt`` per seed (the new text only, without the prompt), generated without
    a cache (an unmasked model cannot use one) on one CPU thread (``threads.torch_threads``)."""
    device = next(model.parameters()).device
    ids = torch.tensor([tokenizer.encode(prompt)], device=device)  # (1, T)
    with torch_threads(1):
        outs = [generate(model, ids, max_new_tokens, temperature=temperature, use_cache=False, seed=s) for s in seeds]
    return [tokenizer.decode(o[0, ids.shape[1] :].tolist()) for o in outs]


def train_runs(cfg: CausalConfig = CausalConfig(), progress: bool = True, device=None) -> dict:
    """Both runs (``train_char_gpt``): ``{"models": {name: GPT}, "histories": {name: History}, "cfg", "seconds"}``,
    keyed by ``NAMES``."""
    start, models, histories = time.perf_counter(), {}, {}
    for causal, name in NAMES.items():
        models[name], histories[name] = train_char_gpt(causal, cfg, progress=progress, device=device)
        models[name].eval()
    return {"models": models, "histories": histories, "cfg": cfg, "seconds": time.perf_counter() - start}


def save_runs(runs: dict, stem: Path = CHECKPOINT) -> None:
    """``<stem>.safetensors`` (both models' weights, keys ``causal.<parameter>`` / ``unmasked.<parameter>``) and
    ``<stem>.json`` (config, both training histories, how long it took, on what)."""
    tensors = {}
    for causal, name in NAMES.items():
        model, tied = runs["models"][name], tied_names(runs["models"][name])
        tensors.update(
            {
                f"{'causal' if causal else 'unmasked'}.{k}": v.detach().contiguous().cpu()
                for k, v in model.state_dict().items()
                if k not in tied
            }
        )
    record = {
        "config": asdict(runs["cfg"]),
        "train_seconds": round(runs["seconds"], 1),
        "histories": {name: h.to_dict() for name, h in runs["histories"].items()},
        **provenance(threads=1),
    }
    save_tensors_and_record(stem, tensors, record)


def load_runs(device=None, stem: Path = CHECKPOINT) -> dict:
    """The committed runs in ``train_runs``'s structure (models in eval mode on ``device``, each with its causal
    mask as trained), plus ``"record"``."""
    record = json.loads(stem.with_suffix(".json").read_text())
    tensors = load_file(str(stem.with_suffix(".safetensors")), device="cpu")
    cfg = CausalConfig(**record["config"])
    models, histories = {}, {}
    for causal, name in NAMES.items():
        prefix = f"{'causal' if causal else 'unmasked'}."
        model = make_model(causal, cfg)
        load_weights(
            model, {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}, device or default_device()
        )
        models[name], histories[name] = model.eval(), History(**record["histories"][name])
    return {"models": models, "histories": histories, "cfg": cfg, "seconds": record["train_seconds"], "record": record}
