"""Train chapter 03's head-count models (one causal attention layer with 1, 2 and 4 heads, three seeds each, on the
"flagged pair" task) and write them to transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_head_count.py

The settings are ``experiments.head_count.HeadCountConfig()``: nine models of about 20 s of CPU time in all, most of
the page's former cost, so the page loads them and measures their accuracy again on a fresh batch.
``tests/test_head_count.py``'s slow test retrains them and checks the chapter's claims on the retrained models.
"""
from __future__ import annotations

import argparse
import sys

from transformer_lib.experiments import head_count


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="the committed checkpoint: cpu")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    args = parser.parse_args(argv)
    trained = head_count.train_runs(device=args.device)
    n = sum(len(v) for v in trained["runs"].values())
    print(f"{n} models trained in {trained['seconds']:.1f} s")
    for h, results in trained["runs"].items():
        print(f"{h} head(s): accuracy per seed {[round(r['accuracy'], 3) for r in results]}")
    if not args.no_save:
        head_count.save_runs(trained)
        print(f"saved to {head_count.CHECKPOINT}.safetensors / .json")
    return trained


if __name__ == "__main__":
    main(sys.argv[1:])
