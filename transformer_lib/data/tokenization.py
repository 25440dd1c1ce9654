"""Tokenizers: text to integer ids and back, and padding id lists into one tensor.

* ``CharTokenizer``: one token per character, with optional special tokens (``PAD``, ``BOS``, ``EOS``) first.
* ``BPETokenizer``: byte-level byte-pair encoding (Sennrich et al. 2016; GPT-2), trained offline by ``tokenizers``.
* ``pad_sequences``: right-pad lists of ids to one ``(B, T_max)`` tensor.

Saved tokenizers are JSON, written atomically by ``checkpoint_io.atomic_write_bytes``.
"""

from __future__ import annotations

import json
from pathlib import Path
from functools import partial
from typing import Iterable, Sequence

import numpy as np
import torch

from ..utils.checks import check_choice, check_empty, check_equal, check_int, check_sequence, check_type
from .checkpoint_io import atomic_write_bytes


class CharTokenizer:
    """One token per character; optional special tokens (e.g. ``<pad>``) take the first ids.

    ``encode("to be") -> [ids]``, ``decode(ids) -> "to be"``. The vocabulary is the sorted set of ``chars``.
    """

    def __init__(self, chars: Iterable[str], specials: Sequence[str] = ()):
        chars = sorted(set(check_type("chars", chars, methods=("__iter__",), expected="a string or characters")))
        check_empty("chars longer than one character", [c for c in chars if len(c) != 1], note="one token each")
        check_sequence("specials", tuple(specials), unique=True, note="distinct special tokens, such as '<pad>'")
        check_empty("specials of one character", [s for s in specials if len(s) < 2], note="a char, not a special")
        self.specials = tuple(specials)
        self.itos = list(self.specials) + chars  # id -> token
        self.stoi = {s: i for i, s in enumerate(self.itos)}  # token -> id

    @classmethod
    def from_text(cls, text: str, specials: Sequence[str] = ()) -> "CharTokenizer":
        return cls(set(text), specials)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def token_lengths(self) -> torch.Tensor:
        """``(V,)``: the characters each id spells (1; 0 for the specials)."""
        return torch.tensor([0] * len(self.specials) + [1] * (self.vocab_size - len(self.specials)))

    def special_id(self, token: str) -> int:
        check_choice("token", token, self.specials)  # one of this tokenizer's specials
        return self.stoi[token]

    pad_id = property(lambda self: self.special_id(PAD))
    bos_id = property(lambda self: self.special_id(BOS))
    eos_id = property(lambda self: self.special_id(EOS))

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        check_type("text", text, str)
        try:
            ids = [self.stoi[c] for c in text]
        except KeyError as err:
            raise ValueError(f"text contains {err.args[0]!r}, which is not in the tokenizer's vocabulary") from None
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def encode_tensor(self, text: str) -> torch.Tensor:
        """Fast path for long texts: ``(N,)`` int64 ids."""
        if all(len(c) == 1 and ord(c) < 256 for c in self.itos[len(self.specials) :]):
            table = np.full(256, -1, dtype=np.int64)
            for c in self.itos[len(self.specials) :]:
                table[ord(c)] = self.stoi[c]
            try:
                ids = table[np.frombuffer(text.encode("latin-1"), dtype=np.uint8)]
            except UnicodeEncodeError:
                ids = np.array([-1])
            if (ids >= 0).all():
                return torch.from_numpy(ids)
        return torch.tensor(self.encode(text), dtype=torch.long)

    def decode(self, ids: Iterable[int], skip_specials: bool = True) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(check_type("ids", ids, methods=("__iter__",)))
        check_sequence("ids", ids, items=partial(check_int, min=0, max=self.vocab_size - 1, note="token ids"))
        n = len(self.specials)
        return "".join(self.itos[i] for i in ids if not (skip_specials and i < n))

    def to_dict(self) -> dict:
        chars = "".join(self.itos[len(self.specials) :])
        return {"type": "CharTokenizer", "specials": list(self.specials), "chars": chars}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        check_equal("d['type']", d.get("type"), "CharTokenizer", note="a CharTokenizer dict")
        return cls(d["chars"], d["specials"])

    def save(self, path: str | Path) -> None:
        atomic_write_bytes(path, json.dumps(self.to_dict(), indent=1).encode())

    @classmethod
    def load(cls, path: str | Path) -> "CharTokenizer":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __eq__(self, other) -> bool:
        return isinstance(other, CharTokenizer) and self.itos == other.itos

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, specials={self.specials})"


class BPETokenizer:
    """Byte-level byte-pair encoding, trained offline by the ``tokenizers`` package.

    BPE (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units") starts from single
    symbols and repeatedly merges the most frequent adjacent pair into a new token; the byte-level variant (GPT-2,
    Radford et al. 2019) starts from the 256 bytes, so any text can be encoded. ``encode(text) -> [ids]``,
    ``decode(ids) -> text``, ``token_lengths: (V,)`` the characters each token spells (for ASCII text such as
    the Shakespeare corpus, ``token_lengths[ids].sum() == len(decode(ids))``).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer  # a tokenizers.Tokenizer
        self.token_lengths = torch.tensor([len(self.tokenizer.decode([i])) for i in range(self.vocab_size)])

    @classmethod
    def train(cls, text: str, vocab_size: int) -> "BPETokenizer":
        """Learn ``vocab_size - 256`` merges from ``text`` (deterministic: same text, same tokenizer)."""
        check_int("vocab_size", vocab_size, min=257, note="more than the 256 byte tokens")
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        tok.train_from_iterator((text[i : i + 100_000] for i in range(0, len(text), 100_000)), trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def encode_tensor(self, text: str) -> torch.Tensor:
        """``(N,)`` int64 ids (the whole Shakespeare corpus takes a few seconds)."""
        return torch.tensor(self.encode(text), dtype=torch.long)

    def decode(self, ids: Iterable[int]) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(check_type("ids", ids, methods=("__iter__",)))
        check_sequence("ids", ids, items=partial(check_int, min=0, max=self.vocab_size - 1, note="token ids"))
        return self.tokenizer.decode(ids)

    def to_dict(self) -> dict:
        return {"type": "BPETokenizer", "tokenizer": json.loads(self.tokenizer.to_str())}

    @classmethod
    def from_dict(cls, d: dict) -> "BPETokenizer":
        from tokenizers import Tokenizer

        check_equal("d['type']", d.get("type"), "BPETokenizer", note="a BPETokenizer dict")
        return cls(Tokenizer.from_str(json.dumps(d["tokenizer"])))

    save = CharTokenizer.save

    @classmethod
    def load(cls, path: str | Path) -> "BPETokenizer":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __eq__(self, other) -> bool:
        return isinstance(other, BPETokenizer) and self.tokenizer.to_str() == other.tokenizer.to_str()

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size})"


PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"  # PAD first: id 0, the models' default pad_id


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    """Right-pad id lists to one ``(B, T_max)`` int64 tensor."""
    check_sequence("seqs", seqs, min_len=1, note="lists of ids")
    check_int("pad_id", pad_id)
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out
