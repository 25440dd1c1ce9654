"""Dates (translation, the encoder-decoder), generated offline, and their teacher-forcing batches.

Used in chapter 05.

Written dates (``"the 3rd of March, 1987"``, ``"3/3/87"``, ``"Tuesday, 3 March 1987"``, ...) to ISO 8601
(``"1987-03-03"``). Days from 1969-01-01 to 2068-12-31 (so ``'87`` is unambiguous: POSIX's two-digit-year rule);
a seeded 10% of the *days* is held out, so test dates never occur in training.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import string
from dataclasses import dataclass
from typing import Sequence

import torch

from ..utils.checks import check_choice, check_int, check_number
from .tokenization import BOS, EOS, PAD, CharTokenizer, pad_sequences


# two-digit years follow POSIX (and Python's strptime "%y"): 69-99 -> 19xx, 00-68 -> 20xx
FIRST_DATE, LAST_DATE = dt.date(1969, 1, 1), dt.date(2068, 12, 31)
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ONES = (
    "",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
)
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_ORDINAL = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}


def ordinal_suffix(n: int) -> str:
    """``1 -> "st"``, ``2 -> "nd"``, ``3 -> "rd"``, ``11 -> "th"``, ``22 -> "nd"``."""
    return "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def number_words(n: int) -> str:
    """``0 < n < 100`` in words: ``87 -> "eighty-seven"``."""
    check_int("n", n, min=1, max=99)
    if n < 20:
        return _ONES[n]
    return _TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else "")


def ordinal_words(n: int) -> str:
    """``3 -> "third"``, ``21 -> "twenty-first"``, ``30 -> "thirtieth"``."""
    words = number_words(n)
    head, _, last = words.rpartition("-")
    last = _ORDINAL.get(last, last[:-1] + "ieth" if last.endswith("y") else last + "th")
    return f"{head}-{last}" if head else last


def year_words(year: int, rng: random.Random) -> str:
    """``1987 -> "nineteen eighty-seven"``; 20xx: ``"two thousand (and) five"`` or ``"twenty twelve"``."""
    century, rest = divmod(check_int("year", year, min=1900, max=2099), 100)
    if century == 19:
        return "nineteen " + (number_words(rest) if rest >= 10 else f"oh {number_words(rest)}" if rest else "hundred")
    if rest == 0:
        return "two thousand"
    if rest >= 10 and rng.random() < 0.5:
        return "twenty " + number_words(rest)
    return "two thousand " + ("and " if rng.random() < 0.5 else "") + number_words(rest)


def _styles():
    def mon(d):
        return MONTHS[d.month - 1]

    def day(d):
        return WEEKDAYS[d.weekday()]

    yy = lambda d: f"{d.year % 100:02d}"  # noqa: E731
    return {
        "long_ordinal": lambda d, r: f"the {d.day}{ordinal_suffix(d.day)} of {mon(d)}, {d.year}",
        "month_day_year": lambda d, r: f"{mon(d)} {d.day}, {d.year}",
        "month_day_year_nocomma": lambda d, r: f"{mon(d)} {d.day} {d.year}",
        "day_month_year": lambda d, r: f"{d.day} {mon(d)} {d.year}",
        "weekday_day_month_year": lambda d, r: f"{day(d)}, {d.day} {mon(d)} {d.year}",
        "abbr_weekday_month_day": lambda d, r: f"{day(d)[:3]}, {mon(d)[:3]} {d.day}, {d.year}",
        "upper_month_day_year": lambda d, r: f"{mon(d).upper()} {d.day}, {d.year}",
        "lower_day_month_year": lambda d, r: f"{d.day} {mon(d).lower()} {d.year}",
        "abbr_ordinal_short_year": lambda d, r: f"{mon(d)[:3]} {d.day}{ordinal_suffix(d.day)} '{yy(d)}",
        "day_abbr_year": lambda d, r: f"{d.day:02d}-{mon(d)[:3]}-{d.year}",
        "us_short": lambda d, r: f"{d.month}/{d.day}/{yy(d)}",  # month first, as in the US
        "us_numeric": lambda d, r: f"{d.month:02d}/{d.day:02d}/{d.year}",
        "eu_dotted": lambda d, r: f"{d.day}.{d.month}.{d.year}",  # day first, as in Germany
        "year_first_slash": lambda d, r: f"{d.year}/{d.month}/{d.day}",
        "spelled": lambda d, r: f"the {ordinal_words(d.day)} of {mon(d)}, {year_words(d.year, r)}",
        "spelled_weekday": lambda d, r: f"{day(d)} the {ordinal_words(d.day)} of {mon(d)} {year_words(d.year, r)}",
    }


DATE_STYLES = _styles()  # name -> f(date, rng) -> text; slashes are month-first, dots day-first


def format_date(date: dt.date, style: str, rng: random.Random | None = None) -> str:
    """Write ``date`` in one of ``DATE_STYLES`` (``rng`` picks among a style's variants, e.g. spelled years)."""
    check_choice("style", style, DATE_STYLES)
    if not FIRST_DATE <= date <= LAST_DATE:
        raise ValueError(f"date must be in {FIRST_DATE}..{LAST_DATE} (two-digit years are read 1969-2068), got {date}")
    return DATE_STYLES[style](date, rng or random.Random(0))


@functools.lru_cache(maxsize=4)
def date_split(seed: int = 0, test_fraction: float = 0.1) -> tuple[tuple[dt.date, ...], tuple[dt.date, ...]]:
    """All days in ``FIRST_DATE..LAST_DATE``, shuffled with ``seed``: ``(train_days, test_days)``, disjoint."""
    check_number("test_fraction", test_fraction, 0, 1, min_open=True, max_open=True)
    days = [FIRST_DATE + dt.timedelta(i) for i in range((LAST_DATE - FIRST_DATE).days + 1)]
    random.Random(seed).shuffle(days)
    n_test = round(len(days) * test_fraction)
    return tuple(sorted(days[n_test:])), tuple(sorted(days[:n_test]))


def date_pairs(
    days: Sequence[dt.date], n: int, seed: int, styles: Sequence[str] | None = None
) -> list[tuple[str, str]]:
    """``n`` (written date, ISO date) pairs: random days from ``days``, random styles, all from ``seed``."""
    rng, styles = random.Random(seed), sorted(DATE_STYLES) if styles is None else list(styles)
    out = []
    for _ in range(n):
        d = rng.choice(days)
        out.append((format_date(d, rng.choice(styles), rng), d.isoformat()))
    return out


def date_test_set(n: int = 1000, seed: int = 1234) -> list[tuple[str, str]]:
    """The fixed held-out set: ``n`` pairs on test days only (never seen in training)."""
    return date_pairs(date_split()[1], n, seed)


def date_tokenizers() -> tuple[CharTokenizer, CharTokenizer]:
    """``(source, target)`` tokenizers with ``<pad>`` (id 0), ``<bos>``, ``<eos>``; fixed alphabets."""
    source_chars = string.ascii_letters + string.digits + " ,./-'"
    return CharTokenizer(source_chars, (PAD, BOS, EOS)), CharTokenizer(string.digits + "-", (PAD, BOS, EOS))


@dataclass
class TranslationBatch:
    """``src: (B, S)``; ``tgt_in: (B, T)`` = BOS + target; ``tgt_out: (B, T)`` = target + EOS; PAD-padded."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device) -> "TranslationBatch":
        return TranslationBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device))


def translation_batch(
    pairs: Sequence[tuple[str, str]], src_tok: CharTokenizer, tgt_tok: CharTokenizer, device=None
) -> TranslationBatch:
    """Encode and pad (source, target) text pairs for teacher-forced training."""
    src = pad_sequences([src_tok.encode(s) for s, _ in pairs], src_tok.pad_id)
    tgt = [tgt_tok.encode(t) for _, t in pairs]
    batch = TranslationBatch(
        src,
        pad_sequences([[tgt_tok.bos_id] + t for t in tgt], tgt_tok.pad_id),
        pad_sequences([t + [tgt_tok.eos_id] for t in tgt], tgt_tok.pad_id),
    )
    return batch if device is None else batch.to(device)
