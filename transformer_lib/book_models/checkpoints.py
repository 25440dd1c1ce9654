"""The book's committed checkpoints: where they lie, their json records, loading them and writing them.

Used in chapters 00, 05, 06, 07, 08 and 09.

Each checkpoint is ``checkpoints/<name>.safetensors`` (weights), ``<name>.json`` (config, training record,
measured metrics) and ``<name>.*tokenizer.json``. Files are read once per process; every ``load_*`` call
returns a *fresh* model, so a chapter that prunes or quantizes one does not change the next chapter's.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..checkpoints import CHECKPOINT_DIR
from ..data.checkpoint_io import atomic_write_bytes, load_weights, save_weights
from ..utils.device import default_device
from ..models.configs import GPTConfig, TransformerConfig
from ..models.transformer import GPT, Transformer
from ..data.tokenization import BPETokenizer, CharTokenizer
from ..utils.checks import check_choice

NAMES = ("shakespeare_gpt", "date_translator")


def checkpoint_info(name: str) -> dict:
    """The json record of a committed checkpoint: config, training run, measured metrics."""
    check_choice("name", name, NAMES)
    return json.loads((CHECKPOINT_DIR / f"{name}.json").read_text())


@functools.lru_cache(maxsize=None)
def _weights(name: str) -> dict[str, torch.Tensor]:
    return load_file(str(CHECKPOINT_DIR / f"{name}.safetensors"), device="cpu")


def _build(model, name: str, device):
    return load_weights(model, _weights(name), default_device() if device is None else device).eval()


@functools.lru_cache(maxsize=1)
def gpt_tokenizer() -> BPETokenizer:
    """The committed GPT's byte-level BPE tokenizer, read once per process."""
    return BPETokenizer.load(CHECKPOINT_DIR / "shakespeare_gpt.tokenizer.json")


def load_shakespeare_gpt(device=None) -> tuple[GPT, BPETokenizer]:
    """The trained GPT (eval mode, on ``device`` or ``default_device()``) and its BPE tokenizer."""
    info = checkpoint_info("shakespeare_gpt")
    model = _build(GPT(GPTConfig(**info["model_config"])), "shakespeare_gpt", device)
    return model, gpt_tokenizer()


def load_date_translator(device=None) -> tuple[Transformer, CharTokenizer, CharTokenizer]:
    """The trained date translator (eval mode) and its ``(source, target)`` tokenizers."""
    info = checkpoint_info("date_translator")
    model = _build(Transformer(TransformerConfig(**info["model_config"])), "date_translator", device)
    return (
        model,
        CharTokenizer.load(CHECKPOINT_DIR / "date_translator.source_tokenizer.json"),
        CharTokenizer.load(CHECKPOINT_DIR / "date_translator.target_tokenizer.json"),
    )


def save_trained(
    name: str, model, tokenizers: dict[str, CharTokenizer | BPETokenizer], record: dict, folder: Path = CHECKPOINT_DIR
) -> None:
    """Write ``<name>.safetensors``, ``<name>.json`` and one ``<name>.<key>tokenizer.json`` per tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model.cpu(), folder / f"{name}.safetensors", {"name": name})
    for key, tok in tokenizers.items():
        tok.save(folder / f"{name}.{key}tokenizer.json")
    atomic_write_bytes(folder / f"{name}.json", json.dumps(record, indent=1).encode())
