"""Install the widget manager and require.js into vendor_static/ so the book serves them itself.

Pages with widgets need require.js and the ipywidgets "embed" manager. By default myst-nb loads
both from CDNs; we take them from the npm registry at build time instead (never committed) and
serve them from the site (`html_static_path` in _config.yml):

    vendor_static/require.js             npm requirejs (require.js)
    vendor_static/widgets/embed-amd.js   npm @jupyter-widgets/html-manager (dist/, fonts included)
    vendor_static/anywidget/index.js     the front-end of the live figures, copied from the installed
                                         anywidget Python package (its AMD build; no npm needed)

Idempotent: does nothing when vendor_static/VERSIONS already names the pinned versions.
Needs `npm` (it comes with Node.js); without it, stops with one sentence saying what to install.
Usage: python tools/vendor_static.py [--force]
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "vendor_static"
# Exact pins: html-manager 1.0.x is the embed manager of ipywidgets 8.
PACKAGES = {"@jupyter-widgets/html-manager": "1.0.15", "requirejs": "2.3.8"}
STAMP = DEST / "VERSIONS"
EXPECTED = ["require.js", "widgets/embed-amd.js"]
NO_NPM = (
    "make book needs npm to fetch the site's JavaScript (require.js, the ipywidgets embed manager): install "
    "Node.js, which includes npm (https://nodejs.org, or Debian/Ubuntu: apt-get install npm, macOS: brew install "
    "node), then run make book again."
)


def up_to_date() -> bool:
    """True when the stamp names the pinned versions and the expected files exist."""
    try:
        pinned = json.loads(STAMP.read_text()) == PACKAGES
    except (OSError, ValueError):
        return False
    return pinned and all((DEST / f).is_file() for f in EXPECTED)


def npm_pack(spec: str, workdir: Path) -> Path:
    """Download one package tarball from the npm registry (`npm pack`) and return its path."""
    npm = shutil.which("npm")
    if npm is None:
        sys.exit(NO_NPM)
    out = subprocess.run(
        [npm, "pack", spec, "--silent", "--pack-destination", str(workdir)],
        check=True,
        capture_output=True,
        text=True,
        cwd=workdir,
    ).stdout
    return workdir / out.strip().splitlines()[-1]


def extract(tarball: Path, workdir: Path) -> Path:
    """Unpack an npm tarball (its files are under `package/`) and return that folder."""
    target = workdir / tarball.stem
    with tarfile.open(tarball) as tar:
        tar.extractall(target, filter="data")
    return target / "package"


def install() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        manager = extract(
            npm_pack(f"@jupyter-widgets/html-manager@{PACKAGES['@jupyter-widgets/html-manager']}", tmp), tmp
        )
        requirejs = extract(npm_pack(f"requirejs@{PACKAGES['requirejs']}", tmp), tmp)
        staging = tmp / "vendor_static"
        (staging / "widgets").mkdir(parents=True)
        shutil.copy2(requirejs / "require.js", staging / "require.js")
        for f in (manager / "dist").iterdir():
            # embed-amd.js and the fonts it loads; not the source maps or the non-AMD bundles
            if f.is_file() and not f.name.endswith(".map") and f.name not in {"embed.js", "libembed-amd.js"}:
                shutil.copy2(f, staging / "widgets" / f.name)
        for lic in (manager / "LICENSE", requirejs / "LICENSE"):
            if lic.is_file():
                shutil.copy2(lic, staging / f"LICENSE.{lic.parent.parent.name}")
        (staging / "VERSIONS").write_text(json.dumps(PACKAGES, indent=1) + "\n")
        if DEST.exists():
            shutil.rmtree(DEST)
        shutil.move(str(staging), DEST)


def copy_anywidget() -> None:
    """anywidget's AMD front-end (and licence) from its installed wheel; copies only when it changed."""
    import anywidget
    from importlib.metadata import distribution

    files = {Path(anywidget.__file__).parent / "nbextension" / "index.js": DEST / "anywidget" / "index.js"}
    for f in distribution("anywidget").files or []:
        if f.name == "LICENSE":
            files[Path(f.locate())] = DEST / "LICENSE.anywidget"
    for src, dest in files.items():
        if not dest.is_file() or dest.read_bytes() != src.read_bytes():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)


def main(argv: list[str]) -> int:
    if shutil.which("npm") is None and ("--force" in argv or not up_to_date()):
        print(NO_NPM, file=sys.stderr)
        return 1
    if "--force" in argv or not up_to_date():
        install()
        print("installed", ", ".join(f"{k}@{v}" for k, v in PACKAGES.items()), "into", DEST.relative_to(ROOT))
    copy_anywidget()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
