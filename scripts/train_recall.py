"""Train chapter 01's recall models (an LSTM and a one-layer attention model at every gap) and write them to
transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_recall.py

The recipe is ``experiments.recall.RECIPE``; the page loads the models and measures their accuracy again.
``tests/experiments/test_recall.py``'s slow test retrains them and checks the chapter's claims on the retrained models.
"""

from __future__ import annotations

import sys

from _runs_cli import train_and_save

from transformer_lib.experiments import recall


def report(runs: dict) -> str:
    return f"{len(runs['models'])} models trained in {runs['seconds']:.1f} s"


def main(argv=None) -> dict:
    return train_and_save(recall, __doc__.splitlines()[0], argv, report)


if __name__ == "__main__":
    main(sys.argv[1:])
