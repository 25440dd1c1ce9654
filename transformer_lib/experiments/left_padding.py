"""Chapter 06's batched generation: prompts of different lengths padded on the **left**, so that every row's
last position is its newest token and the next token is appended to the right of all rows at once.

Used in chapter 06.

``left_pad`` builds the batch and its ``attention_mask`` (True on real tokens, False on the padding);
``generate_batched_and_alone`` runs ``generation.generate`` on the batch and on each prompt alone, so the chapter
can check that padding changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..serving.generation import generate
from ..utils.checks import check_sequence, check_tensor


def _check_prompt(name: str, prompt) -> None:
    """One prompt of ``left_pad``: a non-empty list (or tuple) of token ids, or a 1-D tensor of them."""
    if isinstance(prompt, torch.Tensor):
        check_tensor(name, prompt, ("T",), note="one prompt's token ids")
    else:
        check_sequence(name, prompt, min_len=1, note="one prompt's token ids")


def left_pad(prompts, pad_id: int = 0, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """``prompts``: token ids of different lengths (lists of ints or 1-D tensors) -> ``(ids, attention_mask)``,
    both ``(B, T_max)``; ``ids`` holds ``pad_id`` on the left of the shorter prompts, ``attention_mask`` is False
    there (each row's last token is real, as ``generate`` needs). ``device``: default, the first tensor's."""
    check_sequence("prompts", prompts, min_len=1, items=_check_prompt)
    rows = [p.tolist() if isinstance(p, torch.Tensor) else p for p in prompts]
    if device is None and isinstance(prompts[0], torch.Tensor):
        device = prompts[0].device
    T = max(len(p) for p in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), T, dtype=torch.bool, device=device)
    for b, p in enumerate(rows):
        ids[b, T - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[b, T - len(p) :] = True
    return ids, mask


@dataclass
class BatchedGeneration:
    ids: torch.Tensor  # (B, T_max) the left-padded prompts
    attention_mask: torch.Tensor  # (B, T_max) True on real tokens
    batched: list[list[int]]  # each row's new tokens, generated as one batch
    alone: list[list[int]]  # each prompt's new tokens, generated on its own
    max_logit_diff: float  # largest |logit difference| between the two, over every step and row


@torch.no_grad()
def generate_batched_and_alone(
    model, prompts: list[list[int]], max_new_tokens: int, pad_id: int = 0
) -> BatchedGeneration:
    """Greedy generation of the left-padded batch with its ``attention_mask``, and of each prompt alone; returns
    both and how far their logits ever differ. (Greedy, because a sampler draws for the whole batch at once, so
    seeded samples of a batch and of one prompt differ even when the probabilities agree.)"""
    device = next(model.parameters()).device
    ids, mask = left_pad(prompts, pad_id, device)
    out, logits = generate(model, ids, max_new_tokens, attention_mask=mask, return_logits=True)
    alone, diff = [], 0.0
    for b, p in enumerate(prompts):
        one, one_logits = generate(model, torch.tensor([p], device=device), max_new_tokens, return_logits=True)
        alone.append(one[0, len(p) :].tolist())
        diff = max(diff, float((one_logits[0] - logits[b]).abs().max()))
    return BatchedGeneration(ids, mask, out[:, ids.shape[1] :].tolist(), alone, diff)
