"""LoRA: low-rank adapters on frozen linear layers (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
Models").

Used in chapter 12.

A frozen ``nn.Linear`` with weight ``W: (out, in)`` learns an update of rank ``r`` instead of a new ``W``:

    y = x W^T + b + (alpha / r) * dropout(x) A^T B^T,    A: (r, in),  B: (out, r)

so the layer trains ``r * (in + out)`` numbers instead of ``in * out``. ``A`` starts as the ``peft`` package does
(Kaiming-uniform with ``a = sqrt(5)``, i.e. uniform on ``+-1 / sqrt(in)``) and ``B`` at zero, so a fresh adapter
leaves the model's output unchanged (the paper's section 4.1). The scaling ``alpha / r`` is ``peft``'s default
(``use_rslora=False``).

After training, ``merge`` folds the update into the weight, ``W <- W + (alpha / r) B A``, so inference costs
nothing extra; ``unmerge`` restores the original weight bit for bit (the merged layer keeps the original beside it,
which costs one more copy of the weight until ``unmerge``); ``merge_and_unload`` turns every adapted layer back into a
plain ``nn.Linear`` holding the merged weight, with no copy kept.

``apply_lora(model, LoRAConfig(...))`` replaces the chosen ``nn.Linear`` modules in place and freezes everything
else, like ``peft.get_peft_model`` with ``LoraConfig(bias="none")``. ``target_modules`` is matched by module name as
``peft`` does: a string is a regular expression that must match the whole name (``re.fullmatch``); a list of strings
matches a name equal to an entry or ending in ``"." + entry``. ``tests/training/test_lora.py`` checks outputs, merged
weights
and trainable-parameter counts against ``peft`` 0.21.2 on the same weights and adapters.

``transformer_lib.training.lora_sliced`` adapts row ranges of one fused linear (``SlicedLoRALinear``).

``optimizer_state_bytes`` measures an optimizer's per-parameter state and ``adam_state_bytes`` gives Adam's closed
form: Adam keeps two moments for every trainable number, so LoRA needs them (and gradients) only for the adapters.

Shapes: ``LoRALinear`` maps ``(..., in)`` to ``(..., out)`` in the input's dtype; ``A`` and ``B`` are kept in
float32 (the adapter path runs in float32 and is cast back), whatever the base layer's dtype.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.checks import (
    check_empty,
    check_equal,
    check_int,
    check_number,
    check_probability,
    check_sequence,
    check_tensor,
    check_type,
)


@dataclass(frozen=True)
class LoRAConfig:
    """Which linears get adapters and how: rank ``r``, ``alpha`` (scaling ``alpha / r``), ``dropout`` on the
    adapter's input, and ``target_modules`` (a regex matched against the whole module name, or a list of names /
    name suffixes), as ``peft.LoraConfig(r, lora_alpha, lora_dropout, target_modules)``."""

    r: int = 8
    alpha: float = 8.0
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] | list[str] = field(default=("query", "value"))

    def __post_init__(self):
        check_int("r", self.r, min=1, note="the adapter rank")
        check_number("alpha", self.alpha, min=0, min_open=True, note="scaling alpha / r")
        check_probability("dropout", self.dropout)
        t = check_type("target_modules", self.target_modules, (str, list, tuple), expected="a regex or module names")
        if isinstance(t, str):  # a regex, matched against the whole name
            _check_name("target_modules", t)
            try:
                re.compile(t)
            except re.error as err:
                raise ValueError(f"target_modules {t!r} is not a valid regular expression: {err}") from None
        else:  # module names or name suffixes
            check_sequence("target_modules", t, min_len=1, note="module names", items=_check_name)
            object.__setattr__(self, "target_modules", tuple(t))

    @property
    def scaling(self) -> float:
        return self.alpha / self.r

    def matches(self, name: str) -> bool:
        """Whether the module called ``name`` (e.g. ``"encoder.layer.0.attention.self.query"``) gets an adapter."""
        t = self.target_modules
        if isinstance(t, str):
            return re.fullmatch(t, name) is not None
        return any(name == s or name.endswith("." + s) for s in t)

    def unmatched(self, names: list[str]) -> list[str]:
        """The entries of a list ``target_modules`` that select none of ``names`` (for a regex: none)."""
        t = self.target_modules
        return [] if isinstance(t, str) else [s for s in t if not any(n == s or n.endswith("." + s) for n in names)]


def _check_name(name: str, value) -> None:
    """A module name or regex: a non-empty string."""
    check_type(name, value, str)
    check_int(f"len({name})", len(value), min=1, note="a non-empty name")


class LoRALinear(nn.Module):
    """A frozen base layer plus a trainable rank-``r`` update: ``base(x) + scaling * dropout(x) A^T B^T``.

    ``base``: an ``nn.Linear`` (or any module with ``in_features``/``out_features`` mapping ``(..., in)`` to
    ``(..., out)``, such as ``qlora.NF4Linear``; only an ``nn.Linear`` can be merged). ``lora_A: (r, in)``,
    ``lora_B: (out, r)``, float32, on the base's device. ``generator`` seeds ``A``'s initialisation.
    """

    def __init__(
        self,
        base: nn.Module,
        r: int = 8,
        alpha: float = 8.0,
        dropout: float = 0.0,
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        cfg = LoRAConfig(r=r, alpha=alpha, dropout=dropout, target_modules=("_",))  # checks r, alpha, dropout
        check_type("base", base, nn.Module, expected="an nn.Linear (or a module with in_features, out_features)")
        in_f = check_int("base.in_features", getattr(base, "in_features", None), min=1, note="an nn.Linear's")
        out_f = check_int("base.out_features", getattr(base, "out_features", None), min=1, note="an nn.Linear's")
        device = _device_of(base)
        check_generator(generator, [device])
        self.base = base
        self.base.requires_grad_(False)
        self.in_features, self.out_features = in_f, out_f
        self.r, self.alpha, self.scaling = r, alpha, cfg.scaling
        self.lora_A = nn.Parameter(torch.empty(r, in_f, device=device))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(out_f, r, device=device))  # (out, r): zero, so the update starts at 0
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5), generator=generator)  # peft's init of lora_A
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.merged = False
        self._original_weight: torch.Tensor | None = None

    def delta_weight(self) -> torch.Tensor:
        """The update ``scaling * B A``: ``(out, in)`` float32."""
        return (self.lora_B @ self.lora_A) * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # floating: an integer x failed inside F.linear
        check_tensor("x", x, shape=(..., self.in_features), floating=True, note=f"in_features={self.in_features}")
        y = self.base(x)  # (..., out) in x's dtype
        if self.merged:
            return y
        h = F.linear(F.linear(self.dropout(x).to(self.lora_A.dtype), self.lora_A), self.lora_B)  # (..., out) fp32
        return y + (h * self.scaling).to(y.dtype)

    @torch.no_grad()
    def merge(self) -> None:
        """``W <- W + scaling * B A`` (computed in float32, stored in ``W``'s dtype); keeps the original ``W`` so
        that ``unmerge`` is exact. Raises if already merged or if the base is not an ``nn.Linear``."""
        if self.merged:
            raise RuntimeError("this LoRALinear is already merged; call unmerge() first")
        check_type("base", self.base, nn.Linear, expected="an nn.Linear base to merge into (its weight is rewritten)")
        w = self.base.weight
        merged = (w.float() + self.delta_weight()).to(w.dtype)
        self._original_weight = w.detach().clone()
        w.copy_(merged)
        self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        """Restore the base weight as it was before ``merge``, bit for bit."""
        if not self.merged:
            raise RuntimeError("this LoRALinear is not merged; nothing to unmerge")
        self.base.weight.copy_(self._original_weight)
        self._original_weight = None
        self.merged = False

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha}, scaling={self.scaling:g}, merged={self.merged}"


def _device_of(module: nn.Module) -> torch.device:
    for t in list(module.parameters()) + list(module.buffers()):
        return t.device
    return torch.device("cpu")


def replace_module(model: nn.Module, name: str, new: nn.Module) -> None:
    """Put ``new`` where ``model``'s submodule ``name`` (dotted, as ``named_modules`` gives it) was."""
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def check_generator(generator, devices) -> None:
    """Raise unless ``generator`` is None or a ``torch.Generator`` on the device of every tensor in ``devices``."""
    if check_type("generator", generator, torch.Generator, expected="a torch.Generator", optional=True) is None:
        return
    for device in set(devices):
        check_equal("generator.device", generator.device, device, note="the layers' device")


def lora_targets(model: nn.Module, config: LoRAConfig) -> list[str]:
    """Names of the modules ``config`` selects (checked: at least one, each an ``nn.Linear``)."""
    check_type("model", model, nn.Module, expected="an nn.Module")
    check_type("config", config, LoRAConfig)
    adapted = tuple(n + "." for n in lora_layers(model))  # an adapted layer and its inside are left alone
    names = [
        n
        for n, m in model.named_modules()
        if n and config.matches(n) and not isinstance(m, LoRALinear) and not n.startswith(adapted)
    ]
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)][:6]
    like = f"the model's linear layers are named like {linears}"
    # a misspelt name would otherwise leave its layers without adapters, silently
    check_empty("target_modules entries that match no module", config.unmatched(names), note=like)
    check_sequence(f"the modules target_modules={config.target_modules!r} matches", names, min_len=1, note=like)
    wrong = [
        f"{n} ({type(model.get_submodule(n)).__name__})" for n in names if type(model.get_submodule(n)) is not nn.Linear
    ]
    check_empty(f"the modules target_modules={config.target_modules!r} selects that are not nn.Linear", wrong)
    return names


def apply_lora(model: nn.Module, config: LoRAConfig, generator: torch.Generator | None = None) -> nn.Module:
    """Put a ``LoRALinear`` on every ``nn.Linear`` that ``config.target_modules`` selects (in place) and freeze all
    other parameters; returns ``model``. Every check runs before anything changes."""
    names = lora_targets(model, config)
    check_generator(generator, [model.get_submodule(n).weight.device for n in names])
    model.requires_grad_(False)
    for name in names:
        replace_module(
            model,
            name,
            LoRALinear(model.get_submodule(name), config.r, config.alpha, config.dropout, generator=generator),
        )
    return model


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """``{name: LoRALinear}`` of the model's adapted layers."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def _need_layers(model: nn.Module) -> dict[str, LoRALinear]:
    layers = lora_layers(model)
    check_sequence("model's LoRALinear layers", list(layers), min_len=1, note="call apply_lora first")
    return layers


def merge_lora(model: nn.Module) -> nn.Module:
    """Merge every adapter into its weight (each ``LoRALinear.merge``); raises, changing nothing, if any is already
    merged or has a base that cannot be merged."""
    layers = _need_layers(model)
    bad = [n for n, m in layers.items() if m.merged or not isinstance(m.base, nn.Linear)]
    if bad:
        raise RuntimeError(
            f"cannot merge: these layers are already merged or have a base that is not an nn.Linear: {bad}"
        )
    for m in layers.values():
        m.merge()
    return model


def unmerge_lora(model: nn.Module) -> nn.Module:
    """Undo ``merge_lora`` exactly; raises, changing nothing, if any layer is not merged."""
    layers = _need_layers(model)
    bad = [n for n, m in layers.items() if not m.merged]
    if bad:
        raise RuntimeError(f"cannot unmerge: these layers are not merged: {bad}")
    for m in layers.values():
        m.unmerge()
    return model


@torch.no_grad()
def merge_and_unload(model: nn.Module) -> nn.Module:
    """Replace every ``LoRALinear`` by a plain ``nn.Linear`` holding ``W + scaling * B A`` (in place; returns
    ``model``), as ``peft``'s ``merge_and_unload``. The result has no adapters and no kept copy of ``W``."""
    layers = _need_layers(model)
    for name, m in layers.items():
        check_type(f"{name}.base", m.base, nn.Linear, expected="an nn.Linear to merge into")
    for name, m in layers.items():
        base = m.base
        if not m.merged:
            base.weight.copy_((base.weight.float() + m.delta_weight()).to(base.weight.dtype))
        m._original_weight = None
        replace_module(model, name, base)
    return model


def lora_parameter_count(config: LoRAConfig, shapes: list[tuple[int, int]]) -> int:
    """The closed form ``sum r * (in + out)`` over the adapted layers' ``(out, in)`` weight shapes."""
    return sum(config.r * (n_in + n_out) for n_out, n_in in shapes)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor an optimizer keeps per parameter (measured: Adam's ``exp_avg``, ``exp_avg_sq`` and
    ``step``), after at least one ``step()``; what full fine-tuning pays for every weight and LoRA only for the
    adapters."""
    check_type("optimizer", optimizer, torch.optim.Optimizer, expected="a torch.optim.Optimizer")
    return sum(
        t.numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    )


def adam_state_bytes(params) -> int:
    """The closed form of ``optimizer_state_bytes`` for ``torch.optim.Adam``/``AdamW`` (default options) over the
    trainable tensors among ``params``: two moments of each parameter's size and dtype, and one float32 ``step``
    per tensor."""
    params = [p for p in params if isinstance(p, torch.Tensor) and p.requires_grad]
    return sum(2 * p.numel() * p.element_size() + 4 for p in params)
