"""Train chapter 11's dense model and mixtures of experts with several seeds; write the record and seed 0's models.

    .venv/bin/python scripts/train_moe_pair.py                # seeds 0-4, the recipe's steps, saved
    .venv/bin/python scripts/train_moe_pair.py --seeds 0 --no-save

The recipe lives in ``transformer_lib.experiments.moe_vs_dense``; the slow test
``tests/experiments/test_moe_vs_dense.py::test_recipe_reproduces_the_record`` reruns seed 0 and compares.
"""

from __future__ import annotations

import argparse

import torch

from transformer_lib.experiments import moe_vs_dense as X


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    record, models = X.run_seeds(tuple(args.seeds), args.steps)
    if not args.no_save:
        X.save_record(record, models)
    return record


if __name__ == "__main__":
    main()
