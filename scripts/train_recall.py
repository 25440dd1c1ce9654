"""Train chapter 01's recall models (an LSTM and a one-layer attention model at every gap) and write them to
transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_recall.py

The recipe is ``experiments.recall.RECIPE``; the page loads the models and measures their accuracy again.
``tests/test_recall.py``'s slow test retrains them and checks the chapter's claims on the retrained models.
"""
from __future__ import annotations

import argparse
import sys

from transformer_lib.experiments import recall


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="the committed checkpoint: cpu")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    runs = recall.train_runs(device=args.device, progress=not args.no_progress)
    print(f"{len(runs['models'])} models trained in {runs['seconds']:.1f} s")
    if not args.no_save:
        recall.save_runs(runs)
        print(f"saved to {recall.CHECKPOINT}.safetensors / .json")
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
