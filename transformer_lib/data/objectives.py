"""Pre-training objectives as data: masked language modelling (BERT) and next-token prediction (GPT).

Used in chapter 12.

**Masked language modelling** (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for
Language Understanding", section 3.1 and appendix A.1): each ordinary token is chosen for prediction with
probability 15%; a chosen token is replaced by ``[MASK]`` 80% of the time, by a random token 10% of the time, and
left unchanged 10% of the time, so that the model cannot learn that only ``[MASK]`` positions matter. The loss is
taken only at chosen positions: ``labels`` hold the original token there and ``ignore_index`` (-100, the default of
``F.cross_entropy``) everywhere else. Special tokens (``[CLS]``, ``[SEP]``, ``[PAD]``, ...) and padding are never
chosen. As in Hugging Face's ``DataCollatorForLanguageModeling``, each position is chosen independently (a
Bernoulli draw), so the number chosen per batch varies around 15%. A random replacement is drawn uniformly from the
vocabulary's ordinary (non-special) tokens.

**Next-token prediction** (Radford et al. 2018, "Improving Language Understanding by Generative Pre-Training"):
the target of position ``t`` is the token at ``t + 1``; ``next_token_targets`` shifts a batch and ignores padding.

Shapes: ``input_ids`` ``(B, T)`` int64; ``mlm_mask`` returns ``(B, T)`` tensors, ``next_token_targets``
``(B, T - 1)`` ones. Random draws come from a ``torch.Generator`` on the inputs' device, so a seed fixes them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..utils.checks import check_ids, check_int

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index

NOT_CHOSEN, MASKED, RANDOM, UNCHANGED = 0, 1, 2, 3  # the values of MaskedBatch.choice


@dataclass
class MaskedBatch:
    """The corrupted ``input_ids (B, T)``, the ``labels (B, T)`` (original token at chosen positions,
    ``ignore_index`` elsewhere) and ``choice (B, T)`` int8: ``NOT_CHOSEN`` (0), ``MASKED`` (1, now ``[MASK]``),
    ``RANDOM`` (2, now a random token, which may by chance equal the original) or ``UNCHANGED`` (3)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    choice: torch.Tensor


def _check_ids(input_ids, name="input_ids"):
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.long or input_ids.dim() != 2:
        got = (
            f"{input_ids.dtype} {tuple(input_ids.shape)}"
            if isinstance(input_ids, torch.Tensor)
            else type(input_ids).__name__
        )
        raise ValueError(f"{name} must be an int64 tensor (B, T), got {got}")
    check_ids(name, input_ids, None)  # no negative ids (the vocabulary is not known here)


def _check_mask(attention_mask, input_ids):
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != input_ids.shape:
        got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise ValueError(f"attention_mask must be a (B, T) tensor like input_ids {tuple(input_ids.shape)}, got {got}")
    if attention_mask.dtype != torch.bool and ((attention_mask != 0) & (attention_mask != 1)).any():
        raise ValueError("attention_mask must hold 0/1 (or bool): 1 on real tokens, 0 on padding")
    return attention_mask.bool()


def _check_prob(name, value):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
    if not ok:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")


def mlm_mask(
    input_ids: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    special_token_ids=(),
    attention_mask: torch.Tensor | None = None,
    mask_prob: float = 0.15,
    mask_frac: float = 0.8,
    random_frac: float = 0.1,
    generator: torch.Generator | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> MaskedBatch:
    """BERT's masking of ``input_ids (B, T)``: choose each ordinary position with probability ``mask_prob``; of the
    chosen, ``mask_frac`` become ``mask_token_id``, ``random_frac`` a random ordinary token, the rest stay.

    Positions holding any of ``special_token_ids`` (and ``mask_token_id``), and positions where ``attention_mask``
    is 0, are never chosen. ``input_ids`` is not modified. Returns a ``MaskedBatch``.
    """
    _check_ids(input_ids)
    mask = _check_mask(attention_mask, input_ids)
    for name, value in (("mask_token_id", mask_token_id), ("vocab_size", vocab_size), ("ignore_index", ignore_index)):
        check_int(name, value)
    if not 0 <= mask_token_id < vocab_size:
        raise ValueError(f"mask_token_id must be a token id in [0, vocab_size={vocab_size}), got {mask_token_id}")
    special = sorted({int(i) for i in special_token_ids} | {mask_token_id})
    if any(not 0 <= i < vocab_size for i in special):
        raise ValueError(f"special_token_ids must be ids in [0, vocab_size={vocab_size}), got {special}")
    if 0 <= ignore_index < vocab_size:
        raise ValueError(f"ignore_index must not be a token id (it marks unchosen labels), got {ignore_index}")
    for name, value in (("mask_prob", mask_prob), ("mask_frac", mask_frac), ("random_frac", random_frac)):
        _check_prob(name, value)
    if mask_frac + random_frac > 1.0 + 1e-12:
        raise ValueError(
            f"mask_frac + random_frac must be at most 1 (the rest stay unchanged), got {mask_frac} + {random_frac}"
        )
    if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab_size):
        raise ValueError(
            f"input_ids must lie in [0, vocab_size={vocab_size}), got values in "
            f"[{int(input_ids.min())}, {int(input_ids.max())}]"
        )
    device = input_ids.device
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
        if generator.device.type != device.type:
            raise ValueError(f"generator is on {generator.device}, input_ids on {device}: they must match")
    special_t = torch.tensor(special, device=device)
    ordinary = torch.ones(vocab_size, dtype=torch.bool, device=device)
    ordinary[special_t] = False
    allowed = ordinary.nonzero().squeeze(1)  # (n_ordinary,): the ids a random replacement is drawn from
    if random_frac > 0 and allowed.numel() == 0:
        raise ValueError("every id of the vocabulary is special: no ordinary token to draw a random replacement from")

    eligible = ~torch.isin(input_ids, special_t)  # (B, T)
    if mask is not None:
        eligible &= mask
    chosen = eligible & (torch.rand(input_ids.shape, generator=generator, device=device) < mask_prob)
    u = torch.rand(input_ids.shape, generator=generator, device=device)  # one draw splits the chosen three ways
    choice = torch.zeros(input_ids.shape, dtype=torch.int8, device=device)
    choice[chosen & (u < mask_frac)] = MASKED
    choice[chosen & (u >= mask_frac) & (u < mask_frac + random_frac)] = RANDOM
    choice[chosen & (u >= mask_frac + random_frac)] = UNCHANGED
    if allowed.numel():
        random_ids = allowed[torch.randint(allowed.numel(), input_ids.shape, generator=generator, device=device)]
    else:  # random_frac == 0 (checked above): no position becomes RANDOM
        random_ids = input_ids
    out = input_ids.clone()
    out[choice == MASKED] = mask_token_id
    out = torch.where(choice == RANDOM, random_ids, out)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, ignore_index))
    return MaskedBatch(out, labels, choice)


def next_token_targets(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, ignore_index: int = IGNORE_INDEX
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)``, each ``(B, T - 1)``: ``inputs = input_ids[:, :-1]``, ``targets = input_ids[:, 1:]``,
    with ``ignore_index`` where the target is padding (``attention_mask`` 0), so padding is never predicted."""
    _check_ids(input_ids)
    mask = _check_mask(attention_mask, input_ids)
    if input_ids.shape[1] < 2:
        raise ValueError(f"input_ids needs at least 2 tokens per row to shift, got shape {tuple(input_ids.shape)}")
    inputs, targets = input_ids[:, :-1], input_ids[:, 1:].clone()
    if mask is not None:
        targets[~mask[:, 1:]] = ignore_index
    return inputs, targets
