"""Pruning and quantization of the book's trained GPT: size, quality and speed tables in one run.

    .venv/bin/python benchmarks/bench_compression.py              # both parts, full validation set
    .venv/bin/python benchmarks/bench_compression.py --quick      # a smoke run: 4 batches, 2 repeats
    .venv/bin/python benchmarks/bench_compression.py --only quantization --threads 1

Every table compares against the unpruned / fp32 model measured in the same run and prints the ratio:

* pruning (``_bench_pruning.pruning_tables``, chapter 08): heads kept per layer vs validation loss and forward /
  decode speed; masking vs removing heads vs dropping a layer vs unstructured sparsity; sparse CSR vs dense matmul;
  then MiniLM's 72 heads (``_bench_pruning.minilm_tables``): agreement vs heads removed for gradient importance,
  weight norms and random order, with 95% intervals over sentence sets; masked vs removed heads vs a dropped layer;
* quantization (``_bench_quantization.quantization_tables``, chapter 09): bytes on disk, validation loss and
  perplexity, top-1 agreement with fp32 and decode tokens/s for fp32, bf16, int8 per-channel, int8 W8A8, int4 g128,
  int4 g32, PyTorch's ``quantize_dynamic`` and (if installed) torchao's int8 weight-only; then decode speed of a
  GPT-2-shaped model, where weight memory traffic, not framework overhead, sets the pace; then
  (``_bench_quantization.algorithm_tables``) round-to-nearest vs GPTQ vs AWQ at int4 by group size on the GPT
  (perplexity) and on MiniLM (embedding agreement), SmoothQuant W8A8 on MiniLM by alpha, and NF4 vs int4 MSE.

Machines here are shared and noisy: read the ratios, not the absolute tokens/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _bench_pruning import minilm_tables, pruning_tables  # noqa: E402
from _bench_quantization import quantization_tables  # noqa: E402

from transformer_lib.utils.device import default_device  # noqa: E402
from transformer_lib.book_models.checkpoints import checkpoint_info, load_shakespeare_gpt  # noqa: E402
from transformer_lib.book_models.metrics import shakespeare_val_batches  # noqa: E402


def main(argv=None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="4 validation batches, 2 repeats, 1 round (smoke run)")
    p.add_argument("--only", choices=("pruning", "quantization"), default=None)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--device", default=None, help="default: default_device()")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else default_device()
    info = checkpoint_info("shakespeare_gpt")
    batches = shakespeare_val_batches(info["block_size"])
    if args.quick:
        batches = batches[:4]
    repeats = 2 if args.quick else 5
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {device}; trained GPT "
        f"({info['num_params']:,} parameters, recorded val loss {info['val_loss']:.3f} nats/char); "
        f"{len(batches)} validation batches of {tuple(batches[0][0].shape)}\n",
        flush=True,
    )
    tables, t0 = [], time.perf_counter()
    if args.only in (None, "pruning"):
        model, tok = load_shakespeare_gpt(device)
        tables += pruning_tables(model, tok, batches, device, repeats=repeats)
        tables += minilm_tables(device, repeats=repeats, quick=args.quick)
    if args.only in (None, "quantization"):
        model, tok = load_shakespeare_gpt(device)  # a fresh copy: pruning never touches it
        tables += quantization_tables(
            model, tok, batches, device, repeats=repeats, rounds=1 if args.quick else 2, quick=args.quick
        )
    print(f"{len(tables)} tables in {time.perf_counter() - t0:.0f} s")
    return tables


if __name__ == "__main__":
    main(sys.argv[1:])
