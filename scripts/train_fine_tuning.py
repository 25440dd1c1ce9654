"""Train chapter 12's runs (the two objectives' language models; probe, top-layer, LoRA and QLoRA fine-tuning of
MiniLM for several seeds) and write them to transformer_lib/checkpoints/fine_tuning.*.

    .venv/bin/python scripts/train_fine_tuning.py
    .venv/bin/python scripts/train_fine_tuning.py --no-save

The settings are ``experiments.fine_tuning.RunsConfig()``: several CPU-minutes, far beyond the page's budget, so the
page loads the record and seed 0's heads, adapters and top-layer change (int8) and measures them again.
``tests/experiments/test_fine_tuning.py``'s slow test retrains seed 0 and checks it against the record and the
checkpoint.
"""

from __future__ import annotations

import sys

from _runs_cli import train_and_save

from transformer_lib.experiments import fine_tuning


def report(runs: dict) -> str:
    lines = [f"trained in {runs['seconds']:.0f} s"]
    lines += [f"{k:>10}: validation loss {h.val_loss[-1]:.3f}" for k, h in runs["lm_histories"].items()]
    for method, by_seed in runs["results"].items():
        accs = ", ".join(f"{r['accuracy']:.3f}" for r in by_seed.values())
        agree = ", ".join(f"{r['agreement']:.3f}" for r in by_seed.values())
        lines.append(f"{method:>10}: accuracy {accs}; agreement {agree}")
    return "\n".join(lines)


def main(argv=None) -> dict:
    return train_and_save(fine_tuning, __doc__.splitlines()[0], argv, report)


if __name__ == "__main__":
    main(sys.argv[1:])
