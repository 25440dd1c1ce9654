"""The one command line of the scripts that train a chapter's runs and commit them as a checkpoint.

Each ``scripts/train_<experiment>.py`` passes its experiment module (which has ``train_runs``, ``save_runs`` and
``CHECKPOINT``) and a function that prints what was trained.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Callable


def train_and_save(
    experiment: ModuleType, description: str, argv, report: Callable[[dict], str], progress: bool = True
) -> dict:
    """Parse ``--device``/``--no-save`` (and ``--no-progress`` when the runs draw bars), train, print ``report``,
    and save to ``experiment.CHECKPOINT`` unless told not to; returns the runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cpu", help="the committed checkpoint: cpu")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    if progress:
        parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    kwargs = {"progress": not args.no_progress} if progress else {}
    runs = experiment.train_runs(device=args.device, **kwargs)
    print(report(runs))
    if not args.no_save:
        experiment.save_runs(runs)
        print(f"saved to {experiment.CHECKPOINT}.safetensors / .json")
    return runs
