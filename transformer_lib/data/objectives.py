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
from functools import partial

import torch

from ..utils.checks import (
    check_choice,
    check_equal,
    check_ids,
    check_int,
    check_number,
    check_probability,
    check_sequence,
    check_tensor,
    check_type,
)

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


def _check_ids(input_ids, vocab_size=None, name="input_ids"):
    check_tensor(name, input_ids, shape=("B", "T"), dtype=torch.long, note="token ids")
    check_ids(name, input_ids, vocab_size)  # vocab_size None: no negative ids (the vocabulary is not known here)


def _check_mask(attention_mask, input_ids):
    """``attention_mask`` as a bool tensor: 1 (or True) on real tokens, 0 on padding; ``None`` stays ``None``."""
    like = "like input_ids: 1 on real tokens, 0 on padding"
    if check_tensor("attention_mask", attention_mask, shape=tuple(input_ids.shape), note=like, optional=True) is None:
        return None
    for value in attention_mask.unique().tolist():  # 0/1 or bool (True == 1); NaN is neither
        check_choice("attention_mask", value, (0, 1))
    return attention_mask.bool()


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
    check_int("vocab_size", vocab_size, min=1)
    check_int("mask_token_id", mask_token_id, min=0, max=vocab_size - 1, note="a token id")
    _check_ids(input_ids, vocab_size)
    mask = _check_mask(attention_mask, input_ids)
    special = sorted({int(i) for i in special_token_ids} | {mask_token_id})
    check_sequence("special_token_ids", special, items=partial(check_int, min=0, max=vocab_size - 1, note="token ids"))
    if check_int("ignore_index", ignore_index) >= 0:  # a negative one is never a token id
        check_int("ignore_index", ignore_index, min=vocab_size, note="not a token id: it marks unchosen labels")
    for name, value in (("mask_prob", mask_prob), ("mask_frac", mask_frac), ("random_frac", random_frac)):
        check_probability(name, value, allow_one=True)
    rest = round(1 - mask_frac, 12)  # rounded: 1 - 0.8 is 0.19999999999999996
    check_number(
        "random_frac", random_frac, max=rest, note="mask_frac + random_frac at most 1: the rest stay unchanged"
    )
    if random_frac > 0:  # the vocabulary needs an ordinary token to draw a random replacement from
        check_int("vocab_size", vocab_size, min=len(special) + 1, note=f"more than the {len(special)} special ids")
    device = input_ids.device
    check_type("generator", generator, torch.Generator, expected="a torch.Generator", optional=True)
    if generator is not None:
        check_equal("generator.device.type", generator.device.type, device.type, note="input_ids' device")
    special_t = torch.tensor(special, device=device)
    ordinary = torch.ones(vocab_size, dtype=torch.bool, device=device)
    ordinary[special_t] = False
    allowed = ordinary.nonzero().squeeze(1)  # (n_ordinary,): the ids a random replacement is drawn from

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
    check_int("input_ids.shape[1]", input_ids.shape[1], min=2, note="tokens per row, to shift")
    inputs, targets = input_ids[:, :-1], input_ids[:, 1:].clone()
    if mask is not None:
        targets[~mask[:, 1:]] = ignore_index
    return inputs, targets
