"""The committed checkpoints: the book models' and the chapter experiments' trained weights (``*.safetensors``)
and their records (``*.json``: the recipe, the provenance, the measured results). Data only: the code that writes
and reads them is ``data/checkpoint_io.py``, ``book_models/`` and each experiment's module."""

from pathlib import Path

CHECKPOINT_DIR = Path(__file__).resolve().parent
