"""Chapter 08 exercises: cut a head out of ``qkv``, score heads by weight size, a magnitude-pruning mask, and a
predict-then-run question on the parameters a pruned model keeps (``explain_pruned_params``).

Used in chapter 08.

Each ``check_*`` runs the reader's function and a reference on the same random inputs (``checking.check_against``)
and, when they differ, tries a few common mistakes: if the reader's function matches one, the message says which.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch.nn.utils import prune

from ..blocks.multihead import MultiHeadAttention
from ..compression.pruning import attention_with_heads, head_weight_norms, prune_attention_heads
from .checking import ExerciseResult, check_against, random_int


def _module(w_qkv: torch.Tensor, w_o: torch.Tensor, n_heads: int) -> MultiHeadAttention:
    """A bias-free ``MultiHeadAttention`` holding the given weights."""
    d_model = w_qkv.shape[1]
    attn = attention_with_heads(MultiHeadAttention(d_model, 1, bias=False), n_heads, w_qkv.shape[0] // (3 * n_heads))
    with torch.no_grad():
        attn.qkv.weight.copy_(w_qkv)
        attn.out.weight.copy_(w_o)
    return attn


def _heads_inputs(min_heads: int):
    def make_inputs(gen):
        H, D, d = random_int(gen, min_heads, 5), random_int(gen, 2, 4), random_int(gen, 4, 10)
        keep = sorted(torch.randperm(H, generator=gen)[: random_int(gen, 1, H - 1)].tolist())
        return torch.randn(3 * H * D, d, generator=gen), torch.randn(d, H * D, generator=gen), H, keep

    return make_inputs


# ----------------------------------------------------------------------------- exercise 1
def _reference_rows(w_qkv, keep, n_heads):
    return prune_attention_heads(
        _module(w_qkv, torch.zeros(w_qkv.shape[1], w_qkv.shape[0] // 3), n_heads), keep
    ).qkv.weight.detach()


def _qkv_inputs(min_heads: int):
    inner = _heads_inputs(min_heads)

    def make_inputs(gen):
        w_qkv, _, H, keep = inner(gen)
        return w_qkv, keep, H

    return make_inputs


def check_prune_qkv(fn: Callable) -> ExerciseResult:
    """``fn(w_qkv, keep, n_heads) -> rows``: the rows of the stacked ``[W_Q; W_K; W_V]`` that heads ``keep`` own.

    ``w_qkv: (3 * n_heads * d_head, d_model)``; ``keep``: a sorted list of head indices. Returns
    ``(3 * len(keep) * d_head, d_model)``: the kept heads' ``W_Q`` rows, then their ``W_K`` rows, then their
    ``W_V`` rows (the layout of a ``MultiHeadAttention`` with ``len(keep)`` heads).
    """

    def interleaved(w, keep, H):  # as if each head owned one contiguous block of 3 * d_head rows
        return w.view(H, -1, w.shape[1])[keep].flatten(0, 1)

    def removed(w, keep, H):
        return _reference_rows(w, [h for h in range(H) if h not in keep], H)

    def queries_only(w, keep, H):
        D = w.shape[0] // (3 * H)
        return torch.cat([w[h * D : (h + 1) * D] for h in keep])

    return check_against(
        fn,
        _reference_rows,
        _qkv_inputs(2),
        hints={
            "you treated each head as one block of 3 * d_head rows; the matrix is three blocks [W_Q; W_K; W_V] "
            "of n_heads * d_head rows each, and head h owns rows h*d_head:(h+1)*d_head of EACH block.": interleaved,
            "you returned the rows of the heads NOT in keep: keep lists the heads that stay.": removed,
            "you kept only the W_Q rows; the kept heads' W_K and W_V rows (offset by n_heads * d_head and "
            "2 * n_heads * d_head) must come too.": queries_only,
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _norm_inputs(gen):
    w_qkv, w_o, H, _ = _heads_inputs(2)(gen)
    return w_qkv, w_o, H


def _reference_norms(w_qkv, w_o, n_heads):
    return head_weight_norms(_module(w_qkv, w_o, n_heads))


def check_head_weight_norms(fn: Callable) -> ExerciseResult:
    """``fn(w_qkv, w_o, n_heads) -> (n_heads,)``: the L2 norm of all of each head's weights.

    ``w_qkv: (3 * n_heads * d_head, d_model)`` stacks ``[W_Q; W_K; W_V]``; ``w_o: (d_model, n_heads * d_head)``.
    Head ``h``'s weights are its ``d_head`` rows in each of the three blocks and its ``d_head`` columns of ``W_O``:
    ``sqrt(sum of their squares)`` (``pruning.head_weight_norms``).
    """

    def no_out(w_qkv, w_o, H):
        return _reference_norms(w_qkv, torch.zeros_like(w_o), H)

    def sum_of_norms(w_qkv, w_o, H):
        D = w_o.shape[1] // H
        blocks = w_qkv.view(3, H, D, -1)
        out_cols = w_o.view(-1, H, D).transpose(0, 1).flatten(1)  # (H, d_model * d_head)
        return sum(blocks[i].flatten(1).norm(dim=1) for i in range(3)) + out_cols.norm(dim=1)

    return check_against(
        fn,
        _reference_norms,
        _norm_inputs,
        hints={
            "you left out W_O: a head's output projection is part of it (its d_head columns of w_o).": no_out,
            "you added the norms of the four pieces; the norm of all the weights together is the square root of "
            "the SUM OF SQUARES of every entry.": sum_of_norms,
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def _mask_inputs(gen):
    rows, cols = random_int(gen, 2, 8), 4 * random_int(gen, 1, 2)  # amount * numel is a whole number
    amount = [0.25, 0.5, 0.75][random_int(gen, 0, 2)]
    return torch.randn(rows, cols, generator=gen), amount


def _reference_mask(w, amount):
    return prune.L1Unstructured(amount).compute_mask(w, torch.ones_like(w)).bool()


def _drop_top(score: torch.Tensor, n: int) -> torch.Tensor:
    """Mask False on the ``n`` largest entries of ``score``."""
    keep = torch.ones(score.numel(), dtype=torch.bool)
    keep[torch.topk(score.flatten(), n).indices] = False
    return keep.view(score.shape)


def check_magnitude_mask(fn: Callable) -> ExerciseResult:
    """``fn(w, amount) -> keep``: boolean mask of ``w``'s shape, False on the ``amount * w.numel()`` entries
    with the smallest absolute value, True elsewhere (the mask of ``torch.nn.utils.prune.l1_unstructured``).
    """
    return check_against(
        fn,
        _reference_mask,
        _mask_inputs,
        hints={
            (
                "you removed the LARGEST weights: magnitude pruning drops the smallest |w| and keeps the big ones."
            ): lambda w, a: _drop_top(w.abs(), round(a * w.numel())),
            "you ranked the signed values, so large negative weights were removed; rank by |w|.": lambda w, a: (
                _drop_top(-w, round(a * w.numel()))
            ),
            "your mask is inverted: True must mark the weights that STAY (the large ones).": lambda w, a: (
                ~_reference_mask(w, a)
            ),
        },
    )


# ----------------------------------------------------------------------------- predict, then run
def explain_pruned_params(guess, before: int, after: int, n_removed: int, d_model: int, d_head: int) -> ExerciseResult:
    """Compare the reader's predicted parameter count ``guess`` of a model with ``n_removed`` heads removed
    (``after``, counted on the pruned model) with what one head owns in a biased ``MultiHeadAttention``.

    One head owns ``3 * d_head`` rows of ``qkv`` (``d_model`` weights and one bias each) and ``d_head`` columns of
    ``W_O`` (whose bias belongs to no head). When the guess matches a count that leaves one of these out, the
    message says which.
    """
    if isinstance(guess, bool) or not isinstance(guess, (int, float)):
        return ExerciseResult(
            False, f"put your prediction (a number of parameters) in the variable first, got {guess!r}."
        )
    per_head = 3 * d_head * (d_model + 1) + d_model * d_head
    why = (
        f"each head owns 3 x {d_head} rows of qkv ({d_model} weights + 1 bias each) and {d_head} columns of W_O "
        f"({d_model} weights each): {per_head:,} parameters; {n_removed} heads: {n_removed * per_head:,}, "
        f"so {before:,} - {n_removed * per_head:,} = {after:,}"
    )
    if guess == after:
        return ExerciseResult(True, why + ".")
    wrong = {
        "W_O: each head also owns d_head columns of the output projection": before
        - n_removed * 3 * d_head * (d_model + 1),
        "the qkv biases: each of the head's 3 x d_head rows has one": before - n_removed * 4 * d_model * d_head,
        "W_K and W_V: the head owns rows in all three blocks of qkv, not only in W_Q": before
        - n_removed * (d_head * (d_model + 1) + d_model * d_head),
    }
    for what, count in wrong.items():
        if count is not None and guess == count:
            return ExerciseResult(False, f"you guessed {guess:,}: you left out {what}. In fact {why}.")
    return ExerciseResult(False, f"you guessed {guess:,}, off by {guess - after:+,}. In fact {why}.")
