"""The README's way to run a chapter locally, end to end: JupyterLab, a kernel, a widget that answers.

Starts the JupyterLab of this environment headless on 127.0.0.1 (a free port, a fresh token, a temporary root
folder holding a copy of the chapter, so nothing is written into the repository and no setting of yours is read),
opens the chapter in a headless Chromium or Chrome (``devtools.find_browser``) through the DevTools protocol, runs
all its cells with the kernel ("Run All Cells"), and checks that:

* every code cell ran and none shows an error;
* a kernel-backed ipywidgets ``interactive`` view rendered, and moving its first slider with the keyboard makes
  the kernel redraw its figure (the callback runs in Python: this is what the static book cannot do).

JupyterLab is stopped at the end (``POST /api/shutdown``, which shuts its kernels down), whatever happened.
Every wait is bounded (``RUN_ALL_TIMEOUT_S`` for the chapter's cells).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from devtools import Chromium

pytest.importorskip("websocket")  # websocket-client
pytest.importorskip("jupyterlab")

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "attention.ipynb"  # the README's example; it has a kernel-backed live view
START_TIMEOUT_S = 90
RUN_ALL_TIMEOUT_S = 240
REDRAW_TIMEOUT_S = 60


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never goes through a proxy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(base: str, path: str, token: str, method: str = "GET"):
    request = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"})
    with _NO_PROXY.open(request, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body else None


def _stop(proc: subprocess.Popen, base: str, token: str) -> None:
    try:
        _api(base, "/api/shutdown", token, method="POST")  # the server shuts its kernels down, then exits
        proc.wait(30)
    except (OSError, urllib.error.URLError, subprocess.TimeoutExpired):
        proc.terminate()  # SIGTERM: jupyter_server still cleans its kernels up
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


LIVE_NOTEBOOK = "live_figure.ipynb"  # written by the fixture: one live figure bound to the name `w`
LIVE_CELL = """import torch
from transformer_lib.viz import live_attention
torch.manual_seed(0)
w = live_attention.AttentionSteps(list("abcd"), torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 2))
w"""


@pytest.fixture
def jupyterlab(browser_path, request):
    """(base URL, token, root folder) of a JupyterLab serving a copy of CHAPTER (or, parametrized indirectly with
    LIVE_NOTEBOOK, a one-cell notebook with a live figure); stopped afterwards."""
    home = Path(tempfile.mkdtemp(prefix="jupyterlab-test-"))
    root = home / "root"
    root.mkdir()
    if getattr(request, "param", None) == LIVE_NOTEBOOK:
        import nbformat

        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LIVE_CELL)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, root / LIVE_NOTEBOOK)
    else:
        shutil.copy2(CHAPTER, root / CHAPTER.name)
    token, port = secrets.token_hex(24), _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        # the kernel imports this checkout's transformer_lib, as the tests do
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    jupyter = Path(sys.executable).with_name("jupyter")  # the README's `.venv/bin/jupyter lab`
    lab = [str(jupyter), "lab"] if jupyter.exists() else [sys.executable, "-m", "jupyterlab"]
    cmd = [
        *lab,
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the test runs commands as the menus do
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI runs as root
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{(home / 'server.log').read_text()[-3000:]}")
            try:
                _api(base, "/api/status", token)
                break
            except (OSError, urllib.error.URLError):
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer in {START_TIMEOUT_S} s")
                time.sleep(0.5)
        yield base, token, root
    finally:
        kernels = _kernel_ids(base, token)
        _stop(proc, base, token)
        log.close()
        server_log = (home / "server.log").read_text()
        shutil.rmtree(home, ignore_errors=True)
    assert proc.returncode is not None, "JupyterLab is still running"
    assert _running_kernels(kernels) == [], "a kernel outlived JupyterLab"
    assert "Traceback" not in server_log, server_log[-3000:]


def _kernel_ids(base: str, token: str) -> list[str]:
    try:
        return [k["id"] for k in _api(base, "/api/kernels", token)]
    except (OSError, urllib.error.URLError):
        return []


def _running_kernels(ids: list[str]) -> list[str]:
    """Command lines of live processes started for these kernels (their connection file names the id; Linux)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found += [text for k in ids if f"kernel-{k}" in text]
    return found


# The notebook panel of the chapter, through the app JupyterLab exposes (expose_app_in_browser). Not
# `shell.currentWidget`: that follows the focus, which a headless page never has.
PANEL = (
    "(window.jupyterapp ? Array.from(jupyterapp.shell.widgets('main'))"
    ".find(w => w.content && w.sessionContext) || null : null)"
)
KERNEL_IDLE = (
    f"(p => !!(p && p.sessionContext.session && p.sessionContext.session.kernel "
    f"&& p.sessionContext.session.kernel.status === 'idle'))({PANEL})"
)
CELLS_RUN = f"""(p => {{
  const code = p.content.widgets.filter(c => c.model.type === 'code');
  return [code.length, code.filter(c => c.model.executionCount !== null).length];
}})({PANEL})"""
ERRORS = f"""(p => p.content.widgets.filter(c => c.model.type === 'code')
  .flatMap(c => c.model.outputs.toJSON().filter(o => o.output_type === 'error'))
  .map(o => o.ename + ': ' + o.evalue))({PANEL})"""
# The first kernel-backed `interactive` view, its first slider and the picture it draws.
INTERACT = """(() => {
  const box = document.querySelector('.jp-Notebook .widget-interact');
  if (!box) { return null; }
  const track = box.querySelector('.widget-slider .noUi-target');
  const img = box.querySelector('.jp-OutputArea-output img, .widget-output img');
  return track && img ? [box, track, img] : null;
})()"""
# A 32-bit FNV-1a hash of the picture's data URL (null while the view redraws).
PICTURE = f"""(v => {{
  if (!v) {{ return null; }}
  const s = v[2].src;
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {{ h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0; }}
  return s.length + ':' + h;
}})({INTERACT})"""
READOUT = f"(v => v ? v[1].closest('.widget-slider').querySelector('.widget-readout').textContent : null)({INTERACT})"


@contextmanager
def lab_notebook_running_all(browser_path, base: str, token: str, notebook: str):
    """A fresh Chromium on JupyterLab's page of ``notebook``, its kernel idle, "Run All Cells" started; closed after."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    chrome = Chromium(browser_path, profile)
    try:
        for domain in ("Page", "Runtime"):
            chrome.send(f"{domain}.enable")
        chrome.send("Page.navigate", url=f"{base}/lab/tree/{notebook}?token={token}")
        chrome.wait_for(KERNEL_IDLE, timeout=START_TIMEOUT_S)
        chrome.js(f"jupyterapp.shell.activateById({PANEL}.id)")
        chrome.js("jupyterapp.commands.execute('notebook:run-all-cells').then(() => true)", await_promise=True)
        yield chrome
    finally:
        chrome.close()
        shutil.rmtree(profile, ignore_errors=True)


def test_a_chapter_runs_in_jupyterlab_and_its_widget_answers(jupyterlab, browser_path):
    base, token, root = jupyterlab
    with lab_notebook_running_all(browser_path, base, token, CHAPTER.name) as chrome:
        deadline = time.monotonic() + RUN_ALL_TIMEOUT_S
        while True:
            n_code, n_run = chrome.js(CELLS_RUN)
            if n_run == n_code and chrome.js(KERNEL_IDLE):
                break
            assert chrome.js(ERRORS) == [], "a cell failed"
            assert time.monotonic() < deadline, f"{n_run} of {n_code} cells ran in {RUN_ALL_TIMEOUT_S} s"
            time.sleep(1)
        assert n_code > 10 and chrome.js(ERRORS) == []

        chrome.wait_for(f"{INTERACT} !== null", timeout=30)  # rendered by the JupyterLab widget manager
        before, readout = chrome.js(PICTURE), chrome.js(READOUT)
        assert before and readout, (before, readout)
        chrome.js(
            f"(([box, track]) => {{ track.scrollIntoView({{block: 'center'}}); "
            f"track.querySelector('.noUi-handle').focus(); return document.activeElement.className; }})"
            f"({INTERACT})"
        )
        chrome.key("ArrowRight", 39)  # a reader's key press on the focused slider handle
        moved = chrome.wait_for(f"(r => r !== null && r !== {json.dumps(readout)} ? r : null)({READOUT})", timeout=10)
        # the kernel runs the callback and sends a new figure
        after = chrome.wait_for(
            f"(h => h !== null && h !== {json.dumps(before)} ? h : null)({PICTURE})", timeout=REDRAW_TIMEOUT_S
        )
        print(f"slider {readout} -> {moved}; picture (length:hash) {before} -> {after}")
        assert chrome.js(ERRORS) == []
        if Path("/proc").is_dir():  # what the fixture's check for leftover kernels looks for
            assert _running_kernels(_kernel_ids(base, token)), "the chapter's kernel process was not found"
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [CHAPTER.name]


# Run `code` in the notebook's kernel and resolve to what it printed (the front-end's own kernel connection).
KERNEL_PRINT = (
    """(async (code) => {
  const kernel = %s.sessionContext.session.kernel;
  let text = '';
  const future = kernel.requestExecute({ code });
  future.onIOPub = (msg) => { if (msg.header.msg_type === 'stream') text += msg.content.text; };
  await future.done;
  return text;
})(%%s)"""
    % PANEL
)
QUERY_BOX = "document.querySelector('.jp-Notebook .tl-live select')"


@pytest.mark.parametrize("jupyterlab", [LIVE_NOTEBOOK], indirect=True)
def test_a_readers_choice_in_a_live_figure_reaches_the_kernel_and_back(jupyterlab, browser_path):
    """With a kernel, anywidget's pattern holds both ways: the reader picks a query token in the live figure and
    Python's ``w.query`` is it; Python sets ``w.query`` and the figure's control moves. The static picture the
    cell also writes is hidden once the live figure has drawn."""
    base, token, root = jupyterlab
    with lab_notebook_running_all(browser_path, base, token, LIVE_NOTEBOOK) as chrome:
        chrome.wait_for(f"{QUERY_BOX} !== null", timeout=RUN_ALL_TIMEOUT_S)
        assert chrome.js(ERRORS) == []
        hidden = chrome.js("[...document.querySelectorAll('.jp-Notebook .tl-live-fallback')].map(f => f.hidden)")
        assert hidden == [True]
        assert chrome.js(KERNEL_PRINT % json.dumps("print(w.query)"), await_promise=True).strip() == "0"
        chrome.js(f"(b => {{ b.value = '2'; b.dispatchEvent(new Event('change')); return true; }})({QUERY_BOX})")
        deadline = time.monotonic() + REDRAW_TIMEOUT_S
        while (got := chrome.js(KERNEL_PRINT % json.dumps("print(w.query)"), await_promise=True).strip()) != "2":
            assert time.monotonic() < deadline, f"the kernel still reads w.query = {got} after the reader picked 2"
            time.sleep(0.5)
        chrome.js(KERNEL_PRINT % json.dumps("w.query = 3"), await_promise=True)
        chrome.wait_for(f"{QUERY_BOX}.value === '3'", timeout=REDRAW_TIMEOUT_S)
        assert chrome.js("document.querySelector('.jp-Notebook .tl-live [role=status]').textContent").startswith(
            '3. output for "d"'
        )
        assert chrome.js(ERRORS) == []
