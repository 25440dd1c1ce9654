"""LoRA on row ranges of one fused linear: adapters on ``W_Q`` and ``W_V`` only (the LoRA paper's choice) inside
``MultiHeadAttention``'s stacked ``qkv``, as if the fused projection were separate layers.

``SlicedLoRALinear`` gives each named row range ``start:stop`` of a frozen ``nn.Linear`` its own rank-``r`` pair;
``apply_sliced_lora`` puts one on every module a ``LoRAConfig`` selects, and ``qkv_slices`` names the rows of
``W_Q``, ``W_K`` and ``W_V``. On a MiniLM encoder this equals ``peft`` on a Hugging Face BERT's separate ``query``
and ``value`` (``tests/training/test_lora.py``). Merging, unmerging and ``merge_and_unload`` are
``transformer_lib.training.lora``'s.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import check_choice, check_empty, check_int, check_sequence, check_tensor, check_type
from .lora import LoRAConfig, LoRALinear, check_generator, lora_targets, replace_module


class SlicedLoRALinear(LoRALinear):
    """Adapters on row ranges of one fused ``nn.Linear``: ``slices = {"q": (0, 384), "v": (768, 1152)}`` gives the
    rows ``start:stop`` of the output their own rank-``r`` pair ``A_s: (r, in)``, ``B_s: (stop - start, r)``, as if
    the fused projection were separate linears (e.g. LoRA on ``W_Q`` and ``W_V`` only, the paper's choice, inside
    ``MultiHeadAttention``'s stacked ``qkv``). Rows outside every slice stay frozen. ``lora_A``/``lora_B`` are
    ``nn.ParameterDict``s keyed by slice name; merge, unmerge and ``merge_and_unload`` work as for ``LoRALinear``.
    """

    def __init__(
        self,
        base: nn.Linear,
        slices: dict[str, tuple[int, int]],
        r: int = 8,
        alpha: float = 8.0,
        dropout: float = 0.0,
        generator: torch.Generator | None = None,
    ):
        nn.Module.__init__(self)
        cfg = LoRAConfig(r=r, alpha=alpha, dropout=dropout, target_modules=("_",))  # checks r, alpha, dropout
        check_type("base", base, nn.Linear, expected="an nn.Linear")
        self.slices = check_slices(slices, base.out_features)
        device = base.weight.device
        check_generator(generator, [device])
        self.base = base
        self.base.requires_grad_(False)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.r, self.alpha, self.scaling = r, alpha, cfg.scaling
        self.lora_A, self.lora_B = nn.ParameterDict(), nn.ParameterDict()
        for name, (start, stop) in self.slices.items():
            self.lora_A[name] = nn.Parameter(torch.empty(r, self.in_features, device=device))  # (r, in)
            self.lora_B[name] = nn.Parameter(torch.zeros(stop - start, r, device=device))  # (rows, r)
            nn.init.kaiming_uniform_(self.lora_A[name], a=math.sqrt(5), generator=generator)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.merged = False
        self._original_weight = None

    def delta_weight(self) -> torch.Tensor:
        """``(out, in)`` float32: ``scaling * B_s A_s`` in each slice's rows, zero elsewhere."""
        delta = torch.zeros(self.out_features, self.in_features, device=self.base.weight.device)
        for name, (start, stop) in self.slices.items():
            delta[start:stop] = (self.lora_B[name] @ self.lora_A[name]) * self.scaling
        return delta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x, shape=(..., self.in_features), floating=True, note=f"in_features={self.in_features}")
        y = self.base(x)  # (..., out)
        if self.merged:
            return y
        h = self.dropout(x).to(torch.float32)
        pieces, at = [], 0
        for name, (start, stop) in sorted(self.slices.items(), key=lambda kv: kv[1]):
            if start > at:
                pieces.append(h.new_zeros(*h.shape[:-1], start - at))
            pieces.append(F.linear(F.linear(h, self.lora_A[name]), self.lora_B[name]) * self.scaling)
            at = stop
        if at < self.out_features:
            pieces.append(h.new_zeros(*h.shape[:-1], self.out_features - at))
        return y + torch.cat(pieces, dim=-1).to(y.dtype)  # (..., out)

    def extra_repr(self) -> str:
        return f"slices={self.slices}, " + super().extra_repr()


def check_slices(slices, out_features: int) -> dict[str, tuple[int, int]]:
    """``{name: (start, stop)}`` of non-empty, non-overlapping row ranges within ``out_features``, else an error."""
    check_type("slices", slices, dict, expected="a dict {name: (start, stop)}")
    check_sequence("slices' names", list(slices), min_len=1, note="one slice at least")
    names = [n for n in slices if not (isinstance(n, str) and n.isidentifier())]
    check_empty("slices' names that are not identifiers", [repr(n) for n in names], note="parameter names")
    out = {}
    for name, rng in slices.items():
        start, stop = check_sequence(f"slices[{name!r}]", rng, length=2, note="(start, stop)")
        start = check_int(f"slices[{name!r}][0]", start, min=0, max=out_features - 1, note="start")
        stop = check_int(f"slices[{name!r}][1]", stop, min=start + 1, max=out_features, note="stop, after start")
        out[name] = (start, stop)
    spans = sorted(out.items(), key=lambda item: item[1])  # by start
    overlaps = [(a, b) for (a, (_, a_stop)), (b, (b_start, _)) in zip(spans, spans[1:]) if a_stop > b_start]
    check_empty("overlapping slices", overlaps, note="each output row in one slice at most")
    return out


def apply_sliced_lora(
    model: nn.Module, config: LoRAConfig, slices: dict[str, tuple[int, int]], generator: torch.Generator | None = None
) -> nn.Module:
    """Like ``apply_lora``, but each selected ``nn.Linear`` gets a ``SlicedLoRALinear`` over ``slices`` (e.g.
    ``qkv_slices(384, "qv")`` on every ``"self_attn.qkv"``). Every check runs before anything changes."""
    names = lora_targets(model, config)
    for name in names:
        check_slices(slices, model.get_submodule(name).out_features)
    check_generator(generator, [model.get_submodule(n).weight.device for n in names])
    model.requires_grad_(False)
    for name in names:
        replace_module(
            model,
            name,
            SlicedLoRALinear(
                model.get_submodule(name), slices, config.r, config.alpha, config.dropout, generator=generator
            ),
        )
    return model


def qkv_slices(d_model: int, which: str = "qv") -> dict[str, tuple[int, int]]:
    """The rows of ``W_Q``, ``W_K``, ``W_V`` in ``MultiHeadAttention``'s stacked ``qkv: (3 d_model, d_model)``, for
    the letters in ``which`` (``"qv"``: the paper's choice)."""
    check_int("d_model", d_model, min=1)
    check_type("which", which, str, expected="a str of distinct letters of 'qkv', e.g. 'qv'")
    check_sequence("which", list(which), min_len=1, items=partial(check_choice, choices="qkv"), unique=True)
    return {c: ("qkv".index(c) * d_model, ("qkv".index(c) + 1) * d_model) for c in which}
