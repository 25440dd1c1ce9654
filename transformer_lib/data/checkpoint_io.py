"""Checkpoint files: written atomically, weights as safetensors only (no pickle).

* ``atomic_write_bytes``: every file the library saves (weights, tokenizers, training records) goes through it.
* ``save_weights`` / ``load_weights``: a model's state dict; tied weights (e.g. GPT's ``lm_head.weight`` and
  ``tok_emb.weight``) are stored once and re-tied on loading, by looking at the model being loaded.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import load_file, save


def _current_umask() -> int:
    """The process umask, read without changing it where Linux allows (``/proc/self/status``); elsewhere by the
    set-and-restore idiom, which leaves it changed for an instant."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: readers see the old
    file or the new one, never half a file; on error the temporary file is removed.

    Permissions: ``mkstemp`` creates its file as 0600, which the rename would carry over. Instead, an overwritten
    file keeps its own mode, and a new file gets the mode ``open()`` would give it (0666 minus the umask)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_current_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def tied_names(model: nn.Module) -> dict[str, str]:
    """``{alias: kept name}`` for state-dict entries sharing storage (e.g. GPT's lm_head.weight -> tok_emb.weight)."""
    seen, tied = {}, {}
    for name, t in model.state_dict(keep_vars=True).items():
        key = (t.data_ptr(), t.shape, t.stride())
        if key in seen:
            tied[name] = seen[key]
        else:
            seen[key] = name
    return tied


def save_weights(model: nn.Module, path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """Save the state dict as safetensors, atomically. Tied copies are dropped (safetensors refuses shared
    tensors) and re-tied by ``load_weights`` from the model it loads into; ``metadata`` (str -> str) goes into
    the file's header."""
    tied = tied_names(model)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items() if k not in tied}
    atomic_write_bytes(path, save(tensors, metadata=dict(metadata or {})))


def load_weights(model: nn.Module, source: str | Path | dict, device=None) -> nn.Module:
    """Load a ``save_weights`` file (or its already-read ``{name: tensor}``) into ``model``, strictly (every
    parameter present, none extra), re-tying tied weights; then move it to ``device`` if given."""
    tensors = dict(source) if isinstance(source, dict) else load_file(str(source), device="cpu")
    for alias, name in tied_names(model).items():
        if alias not in tensors and name in tensors:
            tensors[alias] = tensors[name]  # copying into a tied parameter twice is harmless
    model.load_state_dict(tensors, strict=True)
    if device is not None:
        model.to(device)
    return model


def provenance(threads: int | None = None) -> dict:
    """What produced a committed result, for its json record: torch build, CPU capability as torch reports it, the
    number of threads (``threads``, or torch's current count), the machine and the date."""
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads() if threads is None else threads,
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def save_tensors_and_record(stem: str | Path, tensors: dict, record: dict) -> None:
    """Write ``tensors`` to ``<stem>.safetensors`` and ``record`` to ``<stem>.json``, each atomically: the committed
    form of a chapter's trained runs (weights beside the losses and settings that made them)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(stem.with_suffix(".safetensors"), save(tensors, metadata={"name": stem.name}))
    atomic_write_bytes(stem.with_suffix(".json"), json.dumps(record, indent=1).encode())
