"""Chapter 12's live figure: LoRA's rank against the numbers it trains, beside the runs the chapter measured.

Used in chapter 12.

``LoRARank`` hands the browser the shapes of a model's adaptable linears, the head's tensor sizes, the model's
parameter count and the committed runs (trainable numbers and held-out accuracy per seed); ``js/lora.js``
computes the closed form ``sum r * (in + out)`` (``lora.lora_parameter_count``) and Adam's state
(``lora.adam_state_bytes``) for the rank and the linears the reader picks, and draws accuracy only where a run was
measured. ``lora_rank_picture`` is its static picture, from the same numbers through the library's functions.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Sequence

import torch.nn as nn
import traitlets

from ..utils.checks import check_choice, check_int, check_sequence
from ..training.lora import LoRAConfig, adam_state_bytes, lora_parameter_count, lora_targets
from . import live_static
from .live import LiveWidget, check_range


def adaptable_linears(model: nn.Module, names: Sequence[str]) -> list[tuple[str, int, int, int]]:
    """``[(name, out, in, count), ...]``: for each name in ``names``, the ``(out, in)`` shape of the linears whose
    module name ends in it (``lora.LoRAConfig.target_modules``) and how many there are; all of one name must share
    a shape."""
    rows = []
    for name in names:
        found = lora_targets(model, LoRAConfig(target_modules=(name,)))
        shapes = Counter(tuple(model.get_submodule(n).weight.shape) for n in found)
        note = f"all of one name share one (out, in); these are {sorted(shapes)}"
        check_sequence(f"the shapes of the linears named {name!r}", sorted(shapes), length=1, note=note)
        (out, inn), count = shapes.most_common(1)[0]
        rows.append((name, out, inn, count))
    return rows


def _check_linear(name: str, row) -> None:
    """One ``adaptable_linears`` row: ``(name, out, in, count)``, the sizes positive ints."""
    check_sequence(name, row, length=4, note="(name, out, in, count)")
    for j, size in enumerate(row[1:], start=1):
        check_int(f"{name}[{j}]", size, min=1)


def lora_trainable(rank: int, linears, chosen: Sequence[str], head: Sequence[int]) -> int:
    """The library's count for ``js/lora.js``' ``trainableParams``: ``lora_parameter_count`` over the chosen linears'
    shapes, plus the head's numbers."""
    shapes = [(out, inn) for name, out, inn, count in linears if name in chosen for _ in range(count)]
    return lora_parameter_count(LoRAConfig(r=rank, target_modules=tuple(chosen)), shapes) + sum(head)


class LoRARank(LiveWidget):
    """LoRA's trainable numbers for any rank ``1 .. max_rank`` and any of ``target_sets``, computed in the browser.

    ``linears``: ``adaptable_linears`` rows; ``target_sets``: ``(label, names)`` pairs, names among the linears';
    ``head``: the sizes of the head's tensors; ``base_params``: the frozen model's parameters; ``runs``: the measured
    runs as ``(label, trainable, rank, target_set, accuracies)`` (rank 0 and target set -1 for a run without
    adapters); ``chance``: the accuracy of guessing; ``base_name``: what ``base_params`` counts.
    """

    script = "lora.js"
    linears = traitlets.List(traitlets.List()).tag(sync=True)
    target_sets = traitlets.List(traitlets.List()).tag(sync=True)
    head = traitlets.List(traitlets.Int()).tag(sync=True)
    base_params = traitlets.Int().tag(sync=True)
    runs = traitlets.List(traitlets.List()).tag(sync=True)
    chance = traitlets.Float().tag(sync=True)
    base_name = traitlets.Unicode("MiniLM").tag(sync=True)  # what base_params counts
    max_rank = traitlets.Int(384).tag(sync=True)
    rank = traitlets.Int(8).tag(sync=True)
    target_set = traitlets.Int(0).tag(sync=True)

    picture = "lora_rank_picture"  # this module's, not live_static's (static_html below)

    def __init__(
        self,
        linears,
        target_sets,
        head: Sequence[int],
        base_params: int,
        runs,
        chance: float,
        rank: int = 8,
        target_set: int = 0,
        max_rank: int = 384,
        base_name: str = "MiniLM",
    ):
        check_sequence("linears", linears, min_len=1, items=_check_linear, note="adaptable_linears' rows")
        names = [row[0] for row in linears]
        for i, (label, chosen) in enumerate(target_sets):  # (label, names among the linears')
            check_sequence(f"target_sets[{i}][1]", chosen, min_len=1, items=partial(check_choice, choices=names))
        check_range("base_params", base_params, 1, 10**13)
        check_sequence("head", head, min_len=1, items=partial(check_int, min=1), note="the head's tensors' sizes")
        for i, run in enumerate(runs):
            check_sequence(f"runs[{i}]", run, length=5, note="(label, trainable, rank, target_set, accuracies)")
            check_int(f"runs[{i}] rank", run[2], min=0, note="0: a run without adapters")
            check_int(f"runs[{i}] target_set", run[3], min=-1, max=len(target_sets) - 1, note="-1: no adapters")
            check_sequence(f"runs[{i}] accuracies", run[4], min_len=1, note="one per seed")
        check_range("max_rank", max_rank, 2, 4096)
        check_range("rank", rank, 1, max_rank)
        check_range("target_set", target_set, 0, len(target_sets) - 1)
        check_range("chance", chance, 0.0, 1.0, float)
        super().__init__(
            linears=[list(r) for r in linears],
            target_sets=[[lb, list(c)] for lb, c in target_sets],
            head=list(head),
            base_params=base_params,
            chance=float(chance),
            max_rank=max_rank,
            runs=[[r[0], r[1], r[2], r[3], [float(a) for a in r[4]]] for r in runs],
            rank=rank,
            target_set=target_set,
            base_name=str(base_name),
        )

    def static_html(self) -> str:
        return lora_rank_picture(self)


def lora_rank_picture(w: LoRARank) -> str:
    """The static picture of ``w``'s first settings: trained numbers against rank, and the measured accuracies."""
    import matplotlib.pyplot as plt  # under whatever backend is active; image() closes the figure

    label, chosen = w.target_sets[w.target_set]
    ranks = range(1, w.max_rank + 1)
    trained = lora_trainable(w.rank, w.linears, chosen, w.head)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 5.6))  # stacked, as the live figure's two canvases
    a1.semilogy(ranks, [lora_trainable(r, w.linears, chosen, w.head) for r in ranks], label=f"LoRA on {label}")
    for run in w.runs:
        if run[2] == 0:
            a1.axhline(run[1], ls="--", color="C1", lw=1)
            a1.text(1, run[1] * 1.2, f"{run[0]}: {run[1]:,}", fontsize=7, color="C1")
    a1.axhline(w.base_params, ls=":", color="k", lw=1)
    a1.text(1, w.base_params * 1.2, f"all of {w.base_name}: {w.base_params:,}", fontsize=7)
    a1.plot([w.rank], [trained], "o", color="C0")
    a1.set(xlabel="rank r", ylabel="trained numbers", title="what LoRA trains, by rank")
    for i, (name, n, _, _, accs) in enumerate(w.runs):
        a2.semilogx([n] * len(accs), [100 * a for a in accs], "o", color=f"C{2 + i}", label=name)
    a2.axvline(trained, color="C0", lw=1)
    a2.axhline(100 * w.chance, ls=":", color="0.6")
    a2.set(xlabel="trained numbers", ylabel="held-out accuracy (%)", title="measured runs, one dot per seed")
    a2.legend(fontsize=7)
    fig.tight_layout()
    adam = adam_state_bytes_of(w.rank, w.linears, chosen, w.head)
    summary = (
        f"Rank {w.rank} on {label}: {trained - sum(w.head):,} adapter numbers + {sum(w.head):,} in the head "
        f"= {trained:,} trainable, {100 * trained / w.base_params:.1f}% of {w.base_name}'s {w.base_params:,}; Adam "
        f"keeps {adam:,} bytes for them."
    )
    measured = "; ".join(f"{r[0]} {', '.join(f'{100 * a:.1f}' for a in r[4])}%" for r in w.runs)
    alt = (
        f"Top: LoRA's trained numbers against its rank from 1 to {w.max_rank} on a log scale, growing in "
        f"proportion to r, beside the fixed counts of the other methods and of all of {w.base_name} (dotted). "
        f"Bottom: the held-out accuracy of each measured "
        f"run against its trained numbers ({measured}). {summary}"
    )
    return live_static.image(fig, alt, summary)


def adam_state_bytes_of(rank: int, linears, chosen: Sequence[str], head: Sequence[int]) -> int:
    """``lora.adam_state_bytes`` of the trainable tensors LoRA at ``rank`` on ``chosen`` has (A and B per adapted
    linear, and the head's tensors), built as empty shapes (``meta``) rather than counted by hand."""
    import torch

    shapes = [(rank, inn) for name, out, inn, count in linears if name in chosen for _ in range(count)]
    shapes += [(out, rank) for name, out, inn, count in linears if name in chosen for _ in range(count)]
    params = [nn.Parameter(torch.empty(s, device="meta")) for s in shapes]
    params += [nn.Parameter(torch.empty(n, device="meta")) for n in head]
    return adam_state_bytes(params)
