"""How low can a small GPT get on held-out Shakespeare in a fixed wall-clock budget? One run per call.

    .venv/bin/python scripts/gpt_budget.py                            # the book's recipe shape, char level, 110 s
    .venv/bin/python scripts/gpt_budget.py --positional learned      # the same with learned positions
    .venv/bin/python scripts/gpt_budget.py --bpe 1024                 # a byte-level BPE trained on the training works

Prints one json line: steps done, seconds, and the validation loss in **nats per character** on the held-out works
(``data.VAL_WORKS``), so character and BPE models compare directly: for BPE the summed token losses are divided by
the number of characters those tokens spell. Validation uses every non-overlapping window of the held-out text.
This is an exploration tool behind the book's choice of recipe, not part of it: nothing is saved.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from transformer_lib.data import VAL_WORKS, CharTokenizer, get_batch, shakespeare_works
from transformer_lib.models import GPT, GPTConfig
from transformer_lib.train import TrainConfig, gpt_loss, train


def encoders(train_text: str, bpe_vocab: int | None):
    """``(encode, decode, vocab_size)``: characters, or a byte-level BPE trained on ``train_text`` only."""
    if not bpe_vocab:
        tok = CharTokenizer.from_text(train_text + "".join(shakespeare_works()[w] for w in VAL_WORKS))
        return tok.encode, tok.decode, tok.vocab_size
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=bpe_vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((train_text[i: i + 100_000] for i in range(0, len(train_text), 100_000)), trainer)
    return (lambda s: tok.encode(s).ids), tok.decode, tok.get_vocab_size()


@torch.no_grad()
def nats_per_char(model: GPT, ids: torch.Tensor, decode, batch: int = 64) -> float:
    """Summed next-token loss over all non-overlapping windows of ``ids: (N,)``, divided by their characters."""
    model.eval()
    T = model.cfg.block_size
    n = (ids.numel() - 1) // T * T
    x, y = ids[:n].view(-1, T), ids[1: n + 1].view(-1, T)  # (W, T) each
    total = 0.0
    for i in range(0, x.shape[0], batch):
        logits = model(x[i: i + batch])[0]  # (b, T, V)
        total += F.cross_entropy(logits.flatten(0, 1), y[i: i + batch].flatten(), reduction="sum").item()
    return total / len(decode(y.flatten().tolist()))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=110.0)
    p.add_argument("--bpe", type=int, default=None, metavar="VOCAB", help="BPE vocabulary size (default: chars)")
    p.add_argument("--positional", default="rope")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    works = shakespeare_works()
    train_text = "\n".join(t for name, t in works.items() if name not in VAL_WORKS)
    val_text = "\n".join(works[name] for name in VAL_WORKS)
    encode, decode, vocab = encoders(train_text, args.bpe)
    train_ids, val_ids = torch.tensor(encode(train_text)), torch.tensor(encode(val_text))
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=128, n_layers=4, n_heads=4, d_model=128, dropout=0.0,
                          positional=args.positional))
    cfg = TrainConfig(steps=10**6, lr=args.lr, warmup_steps=100, max_seconds=args.seconds, eval_every=10**9,
                      progress=False)
    gen = torch.Generator().manual_seed(0)
    hist = train(model, lambda step: get_batch(train_ids, 128, args.batch, gen), cfg, gpt_loss)
    result = {"tokens": f"bpe {args.bpe}" if args.bpe else "chars", "positional": args.positional, "lr": args.lr,
              "batch": args.batch, "threads": args.threads, "params": model.num_params(),
              "chars_per_token": round(len(val_text) / val_ids.numel(), 3), "steps": hist.steps_done,
              "seconds": round(hist.seconds, 1), "val_nats_per_char": round(nats_per_char(model, val_ids, decode), 4)}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
