"""Chapter 06 exercises: a causal mask (also with a KV cache), a padded causal mask, a safe masked softmax.

Used in chapter 06.

Masks follow the library's convention: boolean, ``True`` where a query may attend to a key.
Each ``check_*`` compares the reader's function with the library's on random cases and, when they differ,
tries a few common mistakes to say which one it looks like.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..blocks.attention import attention_weights
from ..blocks.masking import causal_mask, padding_mask
from .checking import ExerciseResult, check_against, random_int


# ----------------------------------------------------------------------------- exercise 1
def _causal_inputs(gen):
    t_q = random_int(gen, 1, 6)
    return t_q, t_q + random_int(gen, 0, 4)  # t_k >= t_q: the last t_q of t_k positions are the queries


def _ones(t_q, t_k):
    return torch.ones(t_q, t_k, dtype=torch.bool)


def check_causal_mask(fn: Callable) -> ExerciseResult:
    """``fn(t_q, t_k) -> mask``: bool ``(t_q, t_k)``, True where query ``i`` may see key ``j``.

    The queries are the *last* ``t_q`` of the ``t_k`` positions (with a KV cache, ``t_k - t_q`` keys are
    already in the past), so query ``i`` sits at position ``i + t_k - t_q`` and sees keys ``j <= i + t_k - t_q``.
    With ``t_q == t_k`` this is the usual lower-triangular mask."""
    square = lambda gen: (lambda t: (t, t))(random_int(gen, 2, 6))  # noqa: E731
    # hints are tried on square masks; the last one fits a function that is right there, so right but for t_k > t_q
    return check_against(
        fn,
        causal_mask,
        _causal_inputs,
        hint_inputs=square,
        hints={
            (
                "your mask is inverted (True on the future): in this library True means *may attend*; use tril, "
                "not triu."
            ): lambda t_q, t_k: _ones(t_q, t_k).triu(diagonal=1),
            (
                "the diagonal is blocked: a position may attend to itself (tril with diagonal=0, not -1)."
            ): lambda t_q, t_k: _ones(t_q, t_k).tril(diagonal=-1),
            (
                "your mask lets each position see the future (upper triangle): transpose it, or use tril."
            ): lambda t_q, t_k: _ones(t_q, t_k).triu(),
            "you aligned the queries with the *start* of the keys: with t_k > t_q (a KV cache) query i is at position "
            "i + (t_k - t_q), so use .tril(diagonal=t_k - t_q).": lambda t_q, t_k: _ones(t_q, t_k).tril(),
        },
    )


# ----------------------------------------------------------------------------- exercise 2
def _padded_inputs(gen):
    B, T = random_int(gen, 2, 4), random_int(gen, 3, 7)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0] = T  # at least one full row, at least one padded row
    lengths[1] = min(int(lengths[1]), T - 1)
    return lengths, T


def _reference_padded_causal(lengths, T):
    return causal_mask(T)[None] & padding_mask(lengths, T)[:, None, :]  # (B, T, T)


def check_padded_causal_mask(fn: Callable) -> ExerciseResult:
    """``fn(lengths, T) -> mask``: bool ``(B, T, T)`` for a right-padded batch of sequences of ``lengths: (B,)``.

    Query ``i`` of sequence ``b`` may see key ``j`` when ``j <= i`` (causal) and ``j < lengths[b]`` (a real
    token, not padding). Padded *queries* keep their causal row over the real keys (the loss ignores them
    anyway); blocking them completely leaves rows with nothing to attend to."""
    return check_against(
        fn,
        _reference_padded_causal,
        _padded_inputs,
        hints={
            (
                "the padding is not masked: AND the causal mask with a (B, 1, T) key mask, positions < lengths[b]."
            ): lambda lengths, T: causal_mask(T)[None].expand(len(lengths), T, T),
            "the causal part is missing: AND with torch.ones(T, T, dtype=torch.bool).tril().": lambda lengths, T: (
                padding_mask(lengths, T)[:, None, :].expand(len(lengths), T, T)
            ),
            "you also blocked the padded queries (rows), so their rows are all False: a fully masked row has no "
            "valid softmax. Mask keys only: padding_mask(...)[:, None, :].": lambda lengths, T: (
                _reference_padded_causal(lengths, T) & padding_mask(lengths, T)[:, :, None]
            ),
            (
                "the padding mask is applied to queries (rows) instead of keys (columns): index it as [:, None, :]."
            ): lambda lengths, T: causal_mask(T)[None] & padding_mask(lengths, T)[:, :, None],
        },
    )


# ----------------------------------------------------------------------------- exercise 3
def _softmax_inputs(gen):
    R, T = random_int(gen, 2, 5), random_int(gen, 2, 6)
    dtype = (torch.float32, torch.float16, torch.bfloat16)[random_int(gen, 0, 2)]
    scores = torch.randn(R, T, generator=gen) * 4 - 20  # negative scores, as after a large key norm
    keep = torch.rand(R, T, generator=gen) < 0.6
    keep[0] = False  # one fully masked row
    keep[1, 0] = True  # and one with at least one real key
    return scores.to(dtype), keep


def _reference_masked_softmax(scores, keep):
    # scores = q k^T / sqrt(1) with q = 1 and k = scores: the library's attention_weights on them
    return attention_weights(
        torch.ones(*scores.shape[:-1], 1, 1, dtype=scores.dtype), scores[..., :, None], keep[..., None, :]
    )[..., 0, :]


def check_masked_softmax(fn: Callable) -> ExerciseResult:
    """``fn(scores, keep) -> weights``: a softmax over the last dim that ignores blocked keys.

    ``scores: (R, T)`` in fp32, fp16 or bf16; ``keep: (R, T)`` bool. Blocked keys get weight exactly 0; each
    row with at least one kept key sums to 1; a row with no kept key is all zeros (not NaN, not uniform).
    Return the scores' dtype."""

    def fill_softmax(scores, keep, value):
        return torch.softmax(scores.float().masked_fill(~keep, value), -1).to(scores.dtype)

    return check_against(
        fn,
        _reference_masked_softmax,
        _softmax_inputs,
        atol=2e-2,
        rtol=2e-2,
        hints={
            "a fully masked row gives NaN: with -inf everywhere the softmax divides 0 by 0. Zero those rows out "
            "afterwards (e.g. torch.nan_to_num, or masked_fill on rows where keep.any(-1) is False).": lambda s, k: (
                fill_softmax(s, k, float("-inf"))
            ),
            "a fully masked row comes out uniform (1/T each): with a finite fill every entry is equal, so the query "
            "reads the blocked keys. Set rows with no kept key to 0.": lambda s, k: fill_softmax(
                s, k, torch.finfo(torch.float32).min
            ),
        },
    )


# ----------------------------------------------------------------------------- exercise 4: predict, then run
def explain_flipped_mask_prediction(guess, weights: torch.Tensor, keep: torch.Tensor, row: int = 1) -> ExerciseResult:
    """The reader predicted ``guess``: the attention weight (0..1) that query 0 of sequence ``row`` puts on its
    real tokens when our ``keep`` mask (True = may attend) is passed *unchanged* as ``nn.MultiheadAttention``'s
    ``key_padding_mask`` (True = ignore). ``weights: (B, H, T, T)`` are that call's per-head weights,
    ``keep: (B, T)``. Correct within 0.05 of the measured weight (mean over heads); the message explains why."""
    if isinstance(guess, bool) or not isinstance(guess, (int, float)) or not 0 <= guess <= 1:
        return ExerciseResult(False, f"put a weight between 0 and 1 in my_guess, got {guess!r}.")
    on_real = float(weights[row, :, 0][:, keep[row]].sum(-1).float().mean())
    full = [b for b in range(keep.shape[0]) if bool(keep[b].all())]
    nan_note = (
        f" Sequence {full[0]} has no padding: every key is 'ignored', the softmax computes 0/0, and its rows are NaN."
        if full and bool(torch.isnan(weights[full[0]]).all())
        else ""
    )
    why = (
        f"nn.MultiheadAttention reads True as 'ignore this key'. Given our mask, it ignores exactly the real "
        f"tokens and lets the query read only the padding: {on_real:.3f} of the weight is on the real tokens, "
        f"{1 - on_real:.3f} on the padding.{nan_note} No error is raised; flip the mask: key_padding_mask=~keep."
    )
    if abs(guess - on_real) <= 0.05:
        return ExerciseResult(True, why)
    return ExerciseResult(False, f"you predicted {guess:.2f}, the call gave {on_real:.3f}. {why}")
