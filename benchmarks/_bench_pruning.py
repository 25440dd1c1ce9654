"""Pruning part of ``bench_compression.py``: what each kind of pruning does to loss, size and measured speed.

``pruning_tables(model, tokenizer, val_data, device)`` prints three tables and returns them as strings:

1. structural head pruning (lowest gradient importance in each layer, Michel et al. 2019, scored on the first two
   batches of ``val_data``), heads kept per layer vs parameters, validation loss, forward and decode tokens/s;
2. the same model made smaller in different ways (masked heads, removed heads, a dropped layer, 50% unstructured
   sparsity with and without PyTorch's mask attached): speed relative to the unpruned model;
3. a sparse CSR matrix product vs the dense one at several sparsities.

Times are interleaved medians in one run; compare the ratios, not the absolute numbers across runs.
Decoding is greedy with ``generate``'s default static KV cache.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import format_table, interleaved_medians  # noqa: E402

from transformer_lib import pruning as P  # noqa: E402
from transformer_lib.generate import generate  # noqa: E402
from transformer_lib.train import evaluate_loss  # noqa: E402

PROMPT = "ROMEO:\n"
NEW_TOKENS = 64
FORWARD_BATCH = 8


def speeds(models: dict, prompt: torch.Tensor, batch: torch.Tensor, device, repeats: int = 5) -> dict:
    """``{name: (forward tokens/s, decode tokens/s)}``, interleaved medians over ``models``."""
    fns = {}
    for name, (m, ctx) in models.items():
        def fwd(m=m, ctx=ctx):
            with torch.inference_mode(), ctx():
                m(batch)

        def dec(m=m, ctx=ctx):
            with ctx():
                generate(m, prompt, NEW_TOKENS)
        fns[f"{name}/fwd"], fns[f"{name}/dec"] = fwd, dec
    med = interleaved_medians(fns, repeats=repeats, warmup=1, device=device)
    return {name: (batch.numel() / med[f"{name}/fwd"], NEW_TOKENS / med[f"{name}/dec"]) for name in models}


def _plain():
    import contextlib
    return contextlib.nullcontext()


def pruning_tables(model, tokenizer, val_data, device, repeats: int = 5) -> list[str]:
    model = model.to(device).eval()
    val_data = [tuple(t.to(device) for t in b) for b in val_data]
    n_layers, n_heads = len(model.blocks), model.blocks[0].self_attn.n_heads
    prompt = torch.tensor([tokenizer.encode(PROMPT)], device=device)
    batch = val_data[0][0][:FORWARD_BATCH]
    scores = P.head_importance(model, val_data[:2])
    tables = []

    # 1. heads kept per layer
    variants = {f"{n_heads - k}": P.prune_heads(model, P.heads_to_prune(scores, k, per_layer=True)) if k else model
                for k in range(n_heads)}
    sp = speeds({k: (m, _plain) for k, m in variants.items()}, prompt, batch, device, repeats)
    full = sp[str(n_heads)]
    rows = [[k, f"{P.count_parameters(m):,}", f"{evaluate_loss(m, val_data):.3f}", f"{sp[k][0]:,.0f}",
             f"{sp[k][0] / full[0]:.2f}x", f"{sp[k][1]:.0f}", f"{sp[k][1] / full[1]:.2f}x"]
            for k, m in variants.items()]
    tables.append(format_table(f"Structural head pruning by gradient importance ({n_layers} layers, {device})",
                               ["heads/layer", "params", "loss/token", "fwd tok/s", "fwd vs full", "decode tok/s",
                                "decode vs full"], rows))

    # 2. ways to make it "smaller"
    half = P.heads_to_prune(scores, n_heads // 2, per_layer=True)
    mask = P.mask_from_heads(P.head_counts(model), half).to(device)
    layer_scores = [evaluate_loss(P.drop_layers(model, [i]), val_data[:2]) for i in range(n_layers)]
    easiest = min(range(n_layers), key=layer_scores.__getitem__)
    ways = {
        "unpruned": (model, _plain),
        f"{n_heads // 2} heads/layer masked": (model, lambda: P.head_mask(model, mask)),
        f"{n_heads // 2} heads/layer removed": (P.prune_heads(model, half), _plain),
        f"layer {easiest} dropped": (P.drop_layers(model, [easiest]), _plain),
        "50% sparse, mask attached": (P.magnitude_prune(model, 0.5, permanent=False), _plain),
        "50% sparse, zeros baked in": (P.magnitude_prune(model, 0.5), _plain),
    }
    sp = speeds(ways, prompt, batch, device, repeats)
    base = sp["unpruned"]
    rows = []
    for name, (m, ctx) in ways.items():
        with ctx():
            loss = evaluate_loss(m, val_data)
        rows.append([name, f"{P.count_parameters(m, nonzero=True):,}", f"{loss:.3f}", f"{sp[name][0] / base[0]:.2f}x",
                     f"{sp[name][1] / base[1]:.2f}x"])
    tables.append(format_table("Masking vs removing (speed relative to the unpruned model, same run)",
                               ["model", "nonzero params", "loss/token", "forward speed", "decode speed"], rows))

    # 3. sparse CSR vs dense matmul on an FFN weight
    w = model.blocks[0].ffn.up.weight.detach()  # (d_ff, d_model)
    x = torch.randn(w.shape[1], FORWARD_BATCH * batch.shape[1], device=device)  # (d_model, tokens)
    rows = []
    for amount in (0.5, 0.9, 0.99):
        ws = w * (w.abs() > w.abs().flatten().quantile(amount))
        with warnings.catch_warnings():  # "sparse CSR support is in beta": known, and the point of this table
            warnings.simplefilter("ignore", UserWarning)
            csr = ws.to_sparse_csr()
        with torch.inference_mode():
            t = interleaved_medians({"dense": lambda: ws @ x, "csr": lambda: csr @ x}, repeats=repeats * 4,
                                    device=device)
        rows.append([f"{amount:.0%}", f"{t['dense'] * 1e6:.0f}", f"{t['csr'] * 1e6:.0f}",
                     f"{t['dense'] / t['csr']:.2f}x"])
    tables.append(format_table(f"Sparse CSR vs dense matmul, W {tuple(w.shape)} @ X {tuple(x.shape)}",
                               ["sparsity", "dense us", "CSR us", "CSR speed vs dense"], rows))
    for t in tables:
        print(t, end="\n\n")
    return tables


if __name__ == "__main__":  # quick look: .venv/bin/python benchmarks/_bench_pruning.py
    from transformer_lib import default_device
    from transformer_lib.book_models import load_shakespeare_gpt, shakespeare_val_batches
    dev = default_device()
    gpt, tok = load_shakespeare_gpt(dev)
    pruning_tables(gpt, tok, shakespeare_val_batches(gpt.cfg.block_size, n_batches=4), dev)
