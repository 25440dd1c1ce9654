"""Train chapter 04's length-extrapolation models and write them to transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_extrapolation.py

Five positional schemes x three seeds of a tiny GPT on "look back k" (``experiments.extrapolation``), plus one
sinusoidal model with the table at full size: about 80 s of CPU time on one thread, too long for the page, which
loads the models and measures them again. ``tests/experiments/test_extrapolation.py``'s slow test retrains them and
checks
the chapter's claims on the retrained models.
"""

from __future__ import annotations

import sys

from _runs_cli import train_and_save

from transformer_lib.experiments import extrapolation


def report(runs: dict) -> str:
    n = len(runs["by_seed"]) * len(extrapolation.POSITIONALS) + 1
    return f"{n} models trained in {runs['seconds']:.1f} s"


def main(argv=None) -> dict:
    return train_and_save(extrapolation, __doc__.splitlines()[0], argv, report)


if __name__ == "__main__":
    main(sys.argv[1:])
