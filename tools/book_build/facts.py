"""What the book's build knows about itself, which several fixes state or depend on: the commit built, torch's
set-up, the claims mode (tools/book_fixes.py's docstring lists the fixes)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

# set when the build starts: the commit (and whether the tree differs from it), the repository's address and branch,
# the torch facts, the claims mode, the execution cache's inputs' hash
BUILD: dict = {}


def claims_module():
    """transformer_lib.book_tools.claims (imported when first needed: the library is not imported at set-up)."""
    from transformer_lib.book_tools import claims

    return claims


def claims_mode() -> str:
    return claims_module().mode()


def forced() -> bool:
    """Strict mode, or CI: execute every notebook whatever the cache holds."""
    return claims_mode() == "strict" or os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def git_commit(root: Path) -> tuple[str | None, bool]:
    """(HEAD's commit, whether tracked files differ from it); GITHUB_SHA, or None, where git cannot tell."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head.stdout.strip()):
            status = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            return head.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    sha = os.environ.get("GITHUB_SHA", "").strip()
    return (sha, False) if re.fullmatch(r"[0-9a-f]{40}", sha) else (None, False)


def torch_facts() -> dict:
    """What the kernels (which inherit this process's environment) compute with."""
    import torch

    device = "cpu"
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    return {
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "device": device,
    }


def is_notebook(env, docname: str) -> bool:
    try:
        return str(env.doc2path(docname)).endswith(".ipynb")
    except Exception:  # noqa: BLE001 - a document Sphinx no longer knows
        return False


def sync_tool():
    """tools/sync_setup_cells.py (loaded by path: tools/ is not a package)."""
    path = Path(__file__).resolve().parent.parent / "sync_setup_cells.py"
    spec = importlib.util.spec_from_file_location("sync_setup_cells", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
