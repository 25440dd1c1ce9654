"""Train the book's date translator (encoder-decoder Transformer) and write it to transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_translator.py
    .venv/bin/python scripts/train_translator.py --threads 2

The recipe lives in ``transformer_lib.book_models``; accuracy is exact match on 1000 held-out pairs whose days never
occur in training.
"""

from __future__ import annotations

import argparse
import sys

import torch

from transformer_lib.book_models import CHECKPOINT_DIR, TRANSLATOR_STEPS, save_trained, train_date_translator


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=TRANSLATOR_STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--device", default=None, help="default: default_device() (the committed checkpoint: cpu)")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, src_tok, tgt_tok, hist, record = train_date_translator(
        args.steps, seed=args.seed, device=args.device, progress=not args.no_progress
    )
    print(
        f"{hist.steps_done} steps in {hist.seconds:.1f} s ({hist.steps_done / hist.seconds:.2f} steps/s, "
        f"{torch.get_num_threads()} threads); held-out exact match: greedy {record['exact_match_greedy']:.3f}, "
        f"beam 4 {record['exact_match_beam4']:.3f}"
    )
    if not args.no_save:
        save_trained("date_translator", model, {"source_": src_tok, "target_": tgt_tok}, record)
        print(f"saved to {CHECKPOINT_DIR}")
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
