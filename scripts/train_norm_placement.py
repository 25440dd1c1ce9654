"""Train chapter 05's norm-placement runs (no LayerNorm, post-norm, pre-norm; three seeds each) and write their
training record to transformer_lib/checkpoints/norm_placement_runs.json.

    .venv/bin/python scripts/train_norm_placement.py

Nine runs of a deep, thin character GPT (``experiments.norm_placement.NormConfig``): about 35 s of CPU time, more
than the page can spend. The page reads the record (every step's loss, the validation loss); its gradient
measurements at initialisation run in the page. ``tests/experiments/test_norm_placement.py``'s slow test retrains the
runs and
checks the chapter's claims on them.
"""

from __future__ import annotations

import argparse
import sys
import time

from transformer_lib.experiments import norm_placement


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="the committed record: cpu")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    cfg = norm_placement.NormConfig()
    start = time.perf_counter()
    runs = norm_placement.norm_placement_experiment(cfg, progress=not args.no_progress, device=args.device)
    seconds = time.perf_counter() - start
    print(f"{sum(len(rs) for rs in runs.values())} runs trained in {seconds:.1f} s")
    if not args.no_save:
        norm_placement.save_runs(runs, cfg, seconds)
        print(f"saved to {norm_placement.RECORD}")
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
