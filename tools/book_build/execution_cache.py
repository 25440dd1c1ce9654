"""Fix 7: an execution cache without stale numbers.

With ``execute_notebooks: cache`` a reader's second ``make book`` re-executes nothing; but jupyter-cache matches
notebooks by their code cells only. So a hash of ``book_cache_inputs`` (the library with its checkpoints, the
requirements files, pyproject.toml) and of what the provenance line states (torch build, CPU capability, threads,
device, and the variables that change them) is kept beside the cache: when it differs, the cache is emptied and every
notebook page is re-read, hence re-executed. In strict mode (``BOOK_CLAIMS=strict``, the default under ``CI=true``)
and under CI every notebook is executed, whatever the cache holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from sphinx.util import logging

from .facts import BUILD, claims_mode, forced, is_notebook, torch_facts

LOGGER = logging.getLogger(__name__)

DEFAULT_CACHE_INPUTS = ["transformer_lib/**/*", "requirements*.txt", "pyproject.toml"]
STAMP = "book-inputs.sha256"  # beside jupyter-cache's database
# variables that change what torch computes or how fast (they are part of the cache's key)
ENV_FACTS = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
)


def cache_input_files(root: Path, patterns: list[str]) -> list[Path]:
    """The files matching ``patterns`` (globs relative to ``root``), without Python's byte-code caches."""
    return sorted(
        {
            p
            for pattern in patterns
            for p in root.glob(pattern)
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        }
    )


def inputs_hash(root: Path, patterns: list[str], facts: dict) -> str:
    """SHA-256 of the files matching ``patterns`` under ``root`` (names and bytes) and of ``facts`` and the
    variables in ``ENV_FACTS``."""
    digest = hashlib.sha256()
    for path in cache_input_files(root, patterns):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    env = {name: os.environ.get(name) for name in ENV_FACTS}
    digest.update(json.dumps({"facts": facts, "env": env}, sort_keys=True).encode())
    return digest.hexdigest()


def prepare_execution(app) -> None:
    """After myst-nb has read its configuration: force execution where required, empty a stale cache."""
    config = getattr(app.env, "mystnb_config", None)
    root = Path(app.confdir)
    BUILD.update(torch_facts())
    BUILD["mode"] = claims_mode()
    BUILD["inputs"] = inputs_hash(
        root, list(app.config.book_cache_inputs), {k: BUILD[k] for k in ("torch", "capability", "threads", "device")}
    )
    if config is None:
        return
    if forced() and config.execution_mode == "cache" and getattr(app.config, "book_execute_into_cache", False):
        # tools/book_i18n.py: the translated editions read this edition's executions from the cache
        LOGGER.info(f"BOOK_CLAIMS={BUILD['mode']}: executing every notebook into an emptied execution cache")
        shutil.rmtree(config.execution_cache_path, ignore_errors=True)
    elif forced() and config.execution_mode != "force":
        LOGGER.info(f"BOOK_CLAIMS={BUILD['mode']}: executing every notebook (execution mode 'force')")
        # A replacement of myst-nb's state, not a hook: myst-nb reads its `nb_*` options into `env.mystnb_config` in
        # its own builder-inited handler (which also resolves the cache's default path, needed above and below), and
        # no public call changes them after that; setting `nb_execution_mode` in config-inited, the documented route,
        # would take the decision before that path is known and apart from the cache it empties (tests/test_book.py
        # and tests/test_i18n.py call this one handler). myst-nb itself updates the object the same way (`copy`).
        app.env.mystnb_config = config = config.copy(execution_mode="force")
    if config.execution_mode == "cache":
        cache = Path(config.execution_cache_path)
        stamp = cache / STAMP
        old = stamp.read_text().strip() if stamp.is_file() else None
        if cache.exists() and old != BUILD["inputs"]:
            LOGGER.info(
                "the library, its checkpoints, the requirements or torch's set-up changed: "
                f"emptying the execution cache {cache}"
            )
            shutil.rmtree(cache)
        cache.mkdir(parents=True, exist_ok=True)
        stamp.write_text(BUILD["inputs"] + "\n")


def outdated_notebooks(app, env, added, changed, removed) -> list[str]:
    """Every notebook page is re-read (so executed, or taken from the refreshed cache) when forced, or when the
    inputs' hash differs from the one the saved environment was built with."""
    inputs = BUILD.get("inputs")
    if not forced() and getattr(env, "book_inputs", None) == inputs:
        return []
    env.book_inputs = inputs
    return sorted(d for d in env.found_docs if is_notebook(env, d) and d not in added and d not in changed)


def setup(app) -> None:
    app.add_config_value("book_cache_inputs", DEFAULT_CACHE_INPUTS, "env")
    app.add_config_value("book_execute_into_cache", False, "")  # forced execution writes the cache (book_i18n.py)
    app.connect("builder-inited", prepare_execution, priority=900)  # after myst-nb has read its configuration
    app.connect("env-get-outdated", outdated_notebooks)
