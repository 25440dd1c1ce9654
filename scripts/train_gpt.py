"""Train the book's GPT (byte-level BPE) on Shakespeare and write it to transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_gpt.py                 # the recipe: a fixed number of steps, seeded
    .venv/bin/python scripts/train_gpt.py --threads 2     # pin torch's CPU threads (recorded in the json)
    .venv/bin/python scripts/train_gpt.py --threads 2 --warmup 100 --seed 1 --no-save   # a variant, not saved

The recipe (model, schedule, step count) lives in ``transformer_lib.book_models.recipes``, the validation batches in
``transformer_lib.book_models.metrics``; the slow test
``tests/book_models/test_book_models.py::test_gpt_recipe_reproduces_the_checkpoint`` reruns it and compares the
validation loss.
"""

from __future__ import annotations

import argparse
import sys

import torch

from transformer_lib.book_models.checkpoints import CHECKPOINT_DIR, save_trained
from transformer_lib.book_models.recipes import GPT_STEPS, train_shakespeare_gpt


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=GPT_STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: the recipe's)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--device", default=None, help="default: default_device() (the committed checkpoint: cpu)")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok, hist, record = train_shakespeare_gpt(
        args.steps, seed=args.seed, device=args.device, progress=not args.no_progress, warmup_steps=args.warmup
    )
    print(
        f"{hist.steps_done} steps in {hist.seconds:.1f} s ({hist.steps_done / hist.seconds:.2f} steps/s, "
        f"{torch.get_num_threads()} threads); validation loss {record['val_loss']:.4f} nats/char"
    )
    if not args.no_save:
        save_trained("shakespeare_gpt", model, {"": tok}, record)
        print(f"saved to {CHECKPOINT_DIR}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
