"""Chapter 12's live figure (``viz/live_lora.py``, ``viz/js/lora.js``): the counts the browser computes for any
rank and any set of adapted linears are the library's, counted on a real MiniLM with real adapters
(``lora.apply_lora``, ``params.count_parameters``), and Adam's state is what ``torch.optim.AdamW`` keeps."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from test_live_widgets import page, run_module  # noqa: F401  (page: the module-scoped Chromium fixture)

from transformer_lib.training.lora import LoRAConfig, apply_lora, optimizer_state_bytes
from transformer_lib.utils.params import count_parameters
from transformer_lib.models.pretrained import load_minilm
from transformer_lib.viz.live_lora import LoRARank, adam_state_bytes_of, adaptable_linears, lora_trainable

TARGETS = ("qkv", "out", "up", "down")
SETS = [("all four", list(TARGETS)), ("attention", ["qkv", "out"]), ("feed-forward", ["up", "down"]), ("qkv", ["qkv"])]
HEAD = [384 * 4, 4]  # the chapter's head: Linear(384, 4)
RANKS = (1, 8, 97, 384)


def small(**changes) -> dict:
    kwargs = dict(
        linears=[("qkv", 12, 4, 2), ("out", 4, 4, 2)],
        target_sets=[("both", ["qkv", "out"]), ("qkv", ["qkv"])],
        head=[8, 2],
        base_params=1000,
        runs=[("probe", 10, 0, -1, [0.4, 0.5]), ("LoRA", 106, 2, 0, [0.45])],
        chance=0.25,
        rank=2,
        max_rank=4,
    )
    return {**kwargs, **changes}


@pytest.fixture(scope="module")
def minilm():
    return load_minilm(device="cpu")[0]


@pytest.fixture(scope="module")
def library_counts(minilm):
    """``{(rank, set index): trainable numbers}`` counted on MiniLM with adapters and a head."""
    counts = {}
    for s, (_, names) in enumerate(SETS):
        for r in RANKS:
            model = apply_lora(copy.deepcopy(minilm), LoRAConfig(r=r, target_modules=tuple(names)))
            counts[r, s] = count_parameters(model, trainable=True) + sum(HEAD)
            del model
    return counts


def test_adaptable_linears_are_minilms_shapes(minilm):
    assert adaptable_linears(minilm, TARGETS) == [
        ("qkv", 1152, 384, 6),
        ("out", 384, 384, 6),
        ("up", 1536, 384, 6),
        ("down", 384, 1536, 6),
    ]


def test_the_closed_form_is_the_count_of_real_adapters(minilm, library_counts):
    linears = adaptable_linears(minilm, TARGETS)
    for (r, s), n in library_counts.items():
        assert lora_trainable(r, linears, SETS[s][1], HEAD) == n, (r, SETS[s][0])


def test_adam_state_is_what_adamw_keeps_after_a_step():
    """On a small stand-in (the same closed form at any size): the bytes AdamW holds after one step."""
    model = torch.nn.Sequential()
    model.add_module("qkv", torch.nn.Linear(4, 12))
    model.add_module("out", torch.nn.Linear(4, 4))
    apply_lora(model, LoRAConfig(r=3, target_modules=("qkv", "out")))
    head = torch.nn.Linear(4, 2)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.AdamW(params)
    x = torch.randn(5, 4)
    (model.qkv(x).sum() + model.out(x).sum() + head(x).sum()).backward()
    opt.step()
    linears = [("qkv", 12, 4, 1), ("out", 4, 4, 1)]
    assert adam_state_bytes_of(3, linears, ["qkv", "out"], [8, 2]) == optimizer_state_bytes(opt)


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(linears=[]), r"linears must hold at least 1 item\(s\)"),
        (dict(linears=[("qkv", 12, 0, 2)]), r"linears\[0\]\[2\] must be an int >= 1, got 0"),
        (dict(linears=[("qkv", 12, 4)]), r"linears\[0\] must hold exactly 4 item\(s\) \(\(name, out, in, count\)\)"),
        (
            dict(target_sets=[("x", ["nope"])]),
            r"target_sets\[0\]\[1\]\[0\] must be one of \['out', 'qkv'\], got 'nope'",
        ),
        (dict(target_sets=[("x", [])]), r"target_sets\[0\]\[1\] must hold at least 1 item"),
        (dict(head=[]), r"head must hold at least 1 item\(s\) \(the head's tensors' sizes\)"),
        (dict(head=[8, 0]), r"head\[1\] must be an int >= 1, got 0"),
        (dict(runs=[("probe", 10, 0, 5, [0.4])]), r"runs\[0\] target_set must be an int in \[-1, 1\].*got 5"),
        (dict(runs=[("probe", 10, -1, 0, [0.4])]), r"runs\[0\] rank must be an int >= 0"),
        (dict(runs=[("probe", 10, 0, 0, [])]), r"runs\[0\] accuracies must hold at least 1 item"),
        (dict(runs=[("probe", 10, 0, 0)]), r"runs\[0\] must hold exactly 5 item"),
        (dict(rank=9), "rank"),
        (dict(target_set=2), "target_set"),
        (dict(chance=1.5), "chance"),
        (dict(base_params=0), "base_params"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(changes, match):
    with pytest.raises((ValueError, TypeError), match=match):
        LoRARank(**small(**changes))


def test_the_static_picture_states_the_librarys_numbers():
    w = LoRARank(**small())
    text = w.static_html()
    n = lora_trainable(2, w.linears, ["qkv", "out"], [8, 2])
    assert (
        f"= {n:,} trainable" in text
        and f"keeps {adam_state_bytes_of(2, w.linears, ['qkv', 'out'], [8, 2]):,} bytes" in text
    )


@pytest.mark.browser
def test_browser_counts_match_the_librarys_for_every_rank_and_set(page, minilm, library_counts):  # noqa: F811
    linears = adaptable_linears(minilm, TARGETS)
    got = json.loads(
        run_module(
            page,
            LoRARank,
            f"""
      const linears = {json.dumps(linears)}, sets = {json.dumps(SETS)}, head = {json.dumps(HEAD)};
      const out = {{}};
      for (const r of {json.dumps(RANKS)}) sets.forEach(([, names], s) => {{
        out[r + "," + s] = [m.trainableParams(r, linears, names, head), m.adamBytes(r, linears, names, head)];
      }});
      return out;""",
        )
    )
    for (r, s), n in library_counts.items():
        trained, adam = got[f"{r},{s}"]
        assert trained == n, (r, SETS[s][0])
        assert adam == adam_state_bytes_of(r, linears, SETS[s][1], HEAD), (r, SETS[s][0])


@pytest.mark.browser
def test_browser_ranks_of_break_even_and_crossing_are_the_smallest_such_ranks(page, minilm):  # noqa: F811
    linears = adaptable_linears(minilm, TARGETS)
    target = 3_550_468  # the chapter's top-layer run: as many trained numbers from which rank?
    got = json.loads(
        run_module(
            page,
            LoRARank,
            f"""
      const linears = {json.dumps(linears)}, head = {json.dumps(HEAD)};
      return [linears.map(([, o, i]) => m.breakEvenRank(o, i)),
              m.rankMatching({target}, linears, {json.dumps(list(TARGETS))}, head), m.mean([0.25, 0.5, 0.75])];""",
        )
    )
    even, cross, avg = got
    for (_, o, i, _), r in zip(linears, even):
        assert r * (i + o) >= o * i > (r - 1) * (i + o)
    n = lambda r: lora_trainable(r, linears, list(TARGETS), HEAD)  # noqa: E731
    assert n(cross) >= target > n(cross - 1)
    assert avg == 0.5


def test_adaptable_linears_refuses_a_name_whose_linears_differ_in_shape():
    model = torch.nn.Sequential()
    model.add_module("a", torch.nn.Sequential())
    model.a.add_module("qkv", torch.nn.Linear(4, 12))
    model.add_module("b", torch.nn.Sequential())
    model.b.add_module("qkv", torch.nn.Linear(4, 8))
    with pytest.raises(
        ValueError, match=r"shapes of the linears named 'qkv' must hold exactly 1 .*\(8, 4\), \(12, 4\)"
    ):
        adaptable_linears(model, ["qkv"])
