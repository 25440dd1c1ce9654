"""Train chapter 04's length-extrapolation models and write them to transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_extrapolation.py

Five positional schemes x three seeds of a tiny GPT on "look back k" (``experiments.extrapolation``), plus one
sinusoidal model with the table at full size: about 80 s of CPU time on one thread, too long for the page, which
loads the models and measures them again. ``tests/test_extrapolation.py``'s slow test retrains them and checks
the chapter's claims on the retrained models.
"""
from __future__ import annotations

import argparse
import sys

from transformer_lib.experiments import extrapolation


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="the committed checkpoint: cpu")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    runs = extrapolation.train_runs(device=args.device, progress=not args.no_progress)
    print(f"{len(runs['by_seed']) * len(extrapolation.POSITIONALS) + 1} models trained in {runs['seconds']:.1f} s")
    if not args.no_save:
        extrapolation.save_runs(runs)
        print(f"saved to {extrapolation.CHECKPOINT}.safetensors / .json")
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
