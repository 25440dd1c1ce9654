"""The book's two trained models: a small Shakespeare GPT and a date translator.

This package's face gathers every public name of its modules (``from transformer_lib import book_models``, then
``book_models.load_shakespeare_gpt``); each concept lives in its own module, where its documentation is:

* ``recipes``: how each model was trained (configurations, training settings, ``train_shakespeare_gpt``,
  ``train_date_translator``) and the json record of a run (``training_record``); run by ``scripts/train_gpt.py``
  and ``scripts/train_translator.py``;
* ``metrics``: what the book reports about them, the GPT's loss in nats per character on fixed held-out windows
  (``nats_per_char``, ``shakespeare_val_batches``, ``shakespeare_val_loss``) and the translator's exact-match
  accuracy (``date_accuracy``);
* ``checkpoints``: the committed files (``CHECKPOINT_DIR``, ``NAMES``), their records (``checkpoint_info``),
  loading them (``load_shakespeare_gpt``, ``load_date_translator``) and writing them (``save_trained``).
"""

from __future__ import annotations

from .checkpoints import (
    CHECKPOINT_DIR,
    NAMES,
    checkpoint_info,
    gpt_tokenizer,
    load_date_translator,
    load_shakespeare_gpt,
    save_trained,
)
from .metrics import (
    GPT_VAL_BATCH_SIZE,
    GPT_VAL_BATCHES,
    GPT_VAL_SEED,
    date_accuracy,
    nats_per_char,
    shakespeare_gpt_ids,
    shakespeare_val_batches,
    shakespeare_val_loss,
)
from .recipes import (
    GPT_BATCH_SIZE,
    GPT_STEPS,
    GPT_TRAIN,
    GPT_VOCAB,
    TRANSLATOR_BATCH_SIZE,
    TRANSLATOR_STEPS,
    TRANSLATOR_TRAIN,
    gpt_config,
    train_date_translator,
    train_shakespeare_gpt,
    training_record,
    translator_config,
)

__all__ = [
    "CHECKPOINT_DIR",
    "GPT_BATCH_SIZE",
    "GPT_STEPS",
    "GPT_TRAIN",
    "GPT_VAL_BATCHES",
    "GPT_VAL_BATCH_SIZE",
    "GPT_VAL_SEED",
    "GPT_VOCAB",
    "NAMES",
    "TRANSLATOR_BATCH_SIZE",
    "TRANSLATOR_STEPS",
    "TRANSLATOR_TRAIN",
    "checkpoint_info",
    "date_accuracy",
    "gpt_config",
    "gpt_tokenizer",
    "load_date_translator",
    "load_shakespeare_gpt",
    "nats_per_char",
    "save_trained",
    "shakespeare_gpt_ids",
    "shakespeare_val_batches",
    "shakespeare_val_loss",
    "train_date_translator",
    "train_shakespeare_gpt",
    "training_record",
    "translator_config",
]
