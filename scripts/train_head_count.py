"""Train chapter 03's head-count models (one causal attention layer with 1, 2 and 4 heads, three seeds each, on the
"flagged pair" task) and write them to transformer_lib/checkpoints/.

    .venv/bin/python scripts/train_head_count.py

The settings are ``experiments.head_count.HeadCountConfig()``: nine models of about 20 s of CPU time in all, most of
the page's former cost, so the page loads them and measures their accuracy again on a fresh batch.
``tests/experiments/test_head_count.py``'s slow test retrains them and checks the chapter's claims on the retrained
models.
"""

from __future__ import annotations

import sys

from _runs_cli import train_and_save

from transformer_lib.experiments import head_count


def report(trained: dict) -> str:
    lines = [f"{sum(len(v) for v in trained['runs'].values())} models trained in {trained['seconds']:.1f} s"]
    lines += [
        f"{h} head(s): accuracy per seed {[round(r['accuracy'], 3) for r in results]}"
        for h, results in trained["runs"].items()
    ]
    return "\n".join(lines)


def main(argv=None) -> dict:
    return train_and_save(head_count, __doc__.splitlines()[0], argv, report, progress=False)


if __name__ == "__main__":
    main(sys.argv[1:])
