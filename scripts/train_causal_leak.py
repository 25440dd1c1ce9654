"""Train chapter 06's pair of tiny character GPTs (with and without the causal mask) and write them to
transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_causal_leak.py

The settings are ``experiments.causal_leak.CausalConfig()``: two runs of about 20 s of CPU time together, most of
the page's former cost, so the page loads them and measures their losses and samples again.
``tests/experiments/test_experiments.py``'s slow test retrains them and checks the chapter's claims on the retrained
models.
"""

from __future__ import annotations

import sys

from _runs_cli import train_and_save

from transformer_lib.experiments import causal_leak


def report(runs: dict) -> str:
    lines = [f"{len(runs['models'])} models trained in {runs['seconds']:.1f} s"]
    lines += [f"{name:>20}: validation loss {h.val_loss[-1]:.3f} nats/char" for name, h in runs["histories"].items()]
    return "\n".join(lines)


def main(argv=None) -> dict:
    return train_and_save(causal_leak, __doc__.splitlines()[0], argv, report)


if __name__ == "__main__":
    main(sys.argv[1:])
