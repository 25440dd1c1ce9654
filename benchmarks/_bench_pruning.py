"""Pruning part of ``bench_compression.py``: what each kind of pruning does to loss, size and measured speed.

``pruning_tables(model, tokenizer, val_data, device)`` prints three tables and returns them as strings:

1. structural head pruning (lowest gradient importance in each layer, Michel et al. 2019, scored on the first two
   batches of ``val_data``), heads kept per layer vs parameters, validation loss, forward and decode tokens/s;
2. the same model made smaller in different ways (masked heads, removed heads, a dropped layer, 50% unstructured
   sparsity with and without PyTorch's mask attached): speed relative to the unpruned model;
3. a sparse CSR matrix product vs the dense one at several sparsities.

``minilm_tables(device)`` prints two more, on all-MiniLM-L6-v2 (72 heads, ``experiments.minilm_pruning``):

4. agreement with the unpruned model (mean cosine of sentence embeddings, held-out Shakespeare lines) vs heads
   removed, for gradient importance (Michel et al. 2019, random-probe loss), weight norms and random order: mean and
   95% t interval over disjoint sentence-set pairs;
5. the full model vs half its heads masked, removed, and one layer dropped: parameters, FLOPs, forward speed on a
   batch of sentences, agreement.

Times are interleaved medians in one run; compare the ratios, not the absolute numbers across runs.
Decoding is greedy with ``generate``'s default static KV cache.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import format_table  # noqa: E402

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from transformer_lib.compression import pruning as P  # noqa: E402
from transformer_lib.experiments import minilm_pruning as MP  # noqa: E402
from transformer_lib.experiments.pruning_speed import csr_vs_dense, pruned_speeds  # noqa: E402
from transformer_lib.training.loop import evaluate_loss  # noqa: E402

PROMPT = "ROMEO:\n"
NEW_TOKENS = 64
FORWARD_BATCH = 8


def pruning_tables(model, tokenizer, val_data, device, repeats: int = 5) -> list[str]:
    model = model.to(device).eval()
    val_data = [tuple(t.to(device) for t in b) for b in val_data]
    n_layers, n_heads = len(model.blocks), model.blocks[0].self_attn.n_heads
    prompt = torch.tensor([tokenizer.encode(PROMPT)], device=device)
    batch = val_data[0][0][:FORWARD_BATCH]
    scores = P.head_importance(model, val_data[:2])
    tables = []

    # 1. heads kept per layer
    variants = {
        f"{n_heads - k}": P.prune_heads(model, P.heads_to_prune(scores, k, per_layer=True)) if k else model
        for k in range(n_heads)
    }
    sp = pruned_speeds({k: (m, None) for k, m in variants.items()}, prompt, batch, NEW_TOKENS, repeats, device)
    full = sp[str(n_heads)]
    rows = [
        [
            k,
            f"{P.count_parameters(m):,}",
            f"{evaluate_loss(m, val_data):.3f}",
            f"{sp[k][0]:,.0f}",
            f"{sp[k][0] / full[0]:.2f}x",
            f"{sp[k][1]:.0f}",
            f"{sp[k][1] / full[1]:.2f}x",
        ]
        for k, m in variants.items()
    ]
    tables.append(
        format_table(
            f"Structural head pruning by gradient importance ({n_layers} layers, {device})",
            ["heads/layer", "params", "loss/token", "fwd tok/s", "fwd vs full", "decode tok/s", "decode vs full"],
            rows,
        )
    )

    # 2. ways to make it "smaller"
    half = P.heads_to_prune(scores, n_heads // 2, per_layer=True)
    mask = P.mask_from_heads(P.head_counts(model), half).to(device)
    layer_scores = [evaluate_loss(P.drop_layers(model, [i]), val_data[:2]) for i in range(n_layers)]
    easiest = min(range(n_layers), key=layer_scores.__getitem__)
    ways = {  # name: (model, head mask applied while it runs, or None)
        "unpruned": (model, None),
        f"{n_heads // 2} heads/layer masked": (model, mask),
        f"{n_heads // 2} heads/layer removed": (P.prune_heads(model, half), None),
        f"layer {easiest} dropped": (P.drop_layers(model, [easiest]), None),
        "50% sparse, mask attached": (P.magnitude_prune(model, 0.5, permanent=False), None),
        "50% sparse, zeros baked in": (P.magnitude_prune(model, 0.5), None),
    }
    sp = pruned_speeds(ways, prompt, batch, NEW_TOKENS, repeats, device)
    base = sp["unpruned"]
    rows = []
    for name, (m, m_mask) in ways.items():
        with P.head_mask(m, m_mask) if m_mask is not None else contextlib.nullcontext():
            loss = evaluate_loss(m, val_data)
        rows.append(
            [
                name,
                f"{P.count_parameters(m, nonzero=True):,}",
                f"{loss:.3f}",
                f"{sp[name][0] / base[0]:.2f}x",
                f"{sp[name][1] / base[1]:.2f}x",
            ]
        )
    tables.append(
        format_table(
            "Masking vs removing (speed relative to the unpruned model, same run)",
            ["model", "nonzero params", "loss/token", "forward speed", "decode speed"],
            rows,
        )
    )

    # 3. sparse CSR vs dense matmul on an FFN weight
    w = model.blocks[0].ffn.up.weight.detach()  # (d_ff, d_model)
    x = torch.randn(w.shape[1], FORWARD_BATCH * batch.shape[1], device=device)  # (d_model, tokens)
    rows = [
        [f"{amount:.0%}", f"{dense * 1e6:.0f}", f"{csr * 1e6:.0f}", f"{dense / csr:.2f}x"]
        for amount, dense, csr in csr_vs_dense(w, x, (0.5, 0.9, 0.99), repeats * 4, device)
    ]
    tables.append(
        format_table(
            f"Sparse CSR vs dense matmul, W {tuple(w.shape)} @ X {tuple(x.shape)}",
            ["sparsity", "dense us", "CSR us", "CSR speed vs dense"],
            rows,
        )
    )
    for t in tables:
        print(t, end="\n\n")
    return tables


def minilm_tables(device, repeats: int = 5, quick: bool = False) -> list[str]:
    """Tables 4 and 5 (MiniLM). ``quick``: 2 set pairs of 16 lines, 2 points, 1 probe (a smoke run)."""
    from transformer_lib.models.pretrained import load_minilm

    model, tok = load_minilm(device)
    n_sets, size, ns, probes = (2, 16, [18, 36], 1) if quick else (5, 32, [6, 12, 18, 24, 30, 36], 4)
    study = MP.pruning_study(model, tok, n_sets, size, ns, probes=probes, seed=0)
    rows = [
        [n]
        + [
            "{:.3f} ± {:.3f}".format(*MP.t_interval(study["curves"][m][:, i]))
            for m in ("gradient", "magnitude", "random")
        ]
        for i, n in enumerate(ns)
    ]
    tables = [
        format_table(
            f"MiniLM: agreement vs heads removed (of 72), mean ± 95% t interval over {n_sets} "
            f"sentence-set pairs of {size} lines",
            ["heads removed", "gradient importance", "weight norms", "random order"],
            rows,
        )
    ]
    score_enc = tok.encode(study["sets"][0][0], max_length=MP.MAX_TOKENS)
    target = MP.masked_embed(model, score_enc)
    plan = P.heads_to_prune(study["scores"]["gradient"][0], 36)
    keep = [float(MP.agreement(P.drop_layers(model, [i]), score_enc, target).mean()) for i in range(len(model.layers))]
    layer = max(range(len(keep)), key=keep.__getitem__)
    ways = {
        "full": (model, None),
        "36 heads masked": (model, P.mask_from_heads([12] * 6, plan).to(device)),
        "36 heads removed": (P.prune_heads(model, plan), None),
        f"layer {layer} dropped": (P.drop_layers(model, [layer]), None),
    }
    eval_enc, _ = study["eval"][0]
    secs = MP.encoder_speeds(ways, eval_enc, repeats=repeats, device=device)
    rows = []
    for name, (m, mask) in ways.items():
        with FlopCounterMode(display=False) as counter:
            MP.masked_embed(m, eval_enc, mask)
        agree = sum(float(MP.agreement(m, enc, tgt, mask).mean()) for enc, tgt in study["eval"]) / n_sets
        rows.append(
            [
                name,
                f"{P.count_parameters(m):,}",
                f"{counter.get_total_flops() / 1e9:.2f}",
                f"{secs['full'] / secs[name]:.2f}x",
                f"{agree:.3f}",
            ]
        )
    tables.append(
        format_table(
            f"MiniLM: masking vs removing 36 heads vs dropping a layer (forward on "
            f"{eval_enc['input_ids'].shape[0]} sentences, {torch.get_num_threads()} threads, "
            f"{device})",
            ["model", "params", "GFLOPs", "speed vs full", "agreement"],
            rows,
        )
    )
    for t in tables:
        print(t, end="\n\n")
    return tables


if __name__ == "__main__":  # quick look: .venv/bin/python benchmarks/_bench_pruning.py
    from transformer_lib import default_device
    from transformer_lib.book_models.checkpoints import load_shakespeare_gpt
    from transformer_lib.book_models.metrics import shakespeare_val_batches

    dev = default_device()
    gpt, tok = load_shakespeare_gpt(dev)
    pruning_tables(gpt, tok, shakespeare_val_batches(gpt.cfg.block_size, n_batches=4), dev)
    minilm_tables(dev, quick=True)
