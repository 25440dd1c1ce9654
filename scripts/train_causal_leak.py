"""Train chapter 06's pair of tiny character GPTs (with and without the causal mask) and write them to
transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_causal_leak.py

The settings are ``experiments.causal_leak.CausalConfig()``: two runs of about 20 s of CPU time together, most of
the page's former cost, so the page loads them and measures their losses and samples again.
``tests/test_experiments.py``'s slow test retrains them and checks the chapter's claims on the retrained models.
"""
from __future__ import annotations

import argparse
import sys

from transformer_lib.experiments import causal_leak


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="the committed checkpoint: cpu")
    parser.add_argument("--no-save", action="store_true", help="train and report only")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    runs = causal_leak.train_runs(device=args.device, progress=not args.no_progress)
    print(f"{len(runs['models'])} models trained in {runs['seconds']:.1f} s")
    for name, h in runs["histories"].items():
        print(f"{name:>20}: validation loss {h.val_loss[-1]:.3f} nats/char")
    if not args.no_save:
        causal_leak.save_runs(runs)
        print(f"saved to {causal_leak.CHECKPOINT}.safetensors / .json")
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
