"""The rendered book works offline in a real browser: math, kernel-free widgets, no outside request.

Opens one chapter page in a headless Chromium or Chrome (found by ``devtools.find_browser``: ``$CHROME``, then
``PATH``, then the macOS applications; skipped with the reason when there is none, unless ``REQUIRE_BROWSER=1``)
through the Chrome DevTools protocol, served from ``127.0.0.1`` as a web server would, and checks:

* the math is typeset by MathJax (served by the site itself);
* moving a ``frame_slider`` with the keyboard changes the picture shown (no kernel behind the page);
* no request leaves the machine (every URL the page asks for is on ``127.0.0.1`` or a data/blob URL),
  and every local file it asks for exists;
* the page's scripts raise no error.

Which page: ``TARGET`` (a chapter with math and a ``frame_slider``). The page comes from
``_build/html`` when ``make book`` has built it after the last change to its inputs; otherwise the
test builds just that page (plus nothing else) into a temporary folder, with the book's own
``_config.yml``, which costs one execution of the notebook instead of the whole book.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from devtools import Chromium

# the browser tests below carry these marks; the test of every chapter's provenance line (marked site) does not
browser_test = pytest.mark.usefixtures("_websocket_client")

ROOT = Path(__file__).resolve().parents[1]
TARGET = "notebooks/kv_cache"  # the page under test: a chapter with math and a frame_slider (02 went live)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
NON_NETWORK_SCHEMES = {"data", "blob", "about", "chrome", "chrome-extension", "devtools"}


@pytest.fixture(scope="module")
def _websocket_client():
    pytest.importorskip("websocket")  # websocket-client, which tests/devtools.py drives the browser with


# ------------------------------------------------------------------------------------- the page


def _inputs_of_target() -> list[Path]:
    """Files whose change makes a built page of TARGET stale."""
    files = [
        ROOT / f"{TARGET}.ipynb",
        ROOT / "_config.yml",
        ROOT / "vendor_static" / "VERSIONS",
        ROOT / "tools" / "book_fixes.py",
    ]
    files += list((ROOT / "tools" / "book_build").glob("*.py"))  # the parts book_fixes.py loads
    files += list((ROOT / "book" / "static").glob("*"))
    files += list((ROOT / "transformer_lib").rglob("*.py"))
    return [f for f in files if f.exists()]


def _fresh_page(html_dir: Path) -> bool:
    page = html_dir / f"{TARGET}.html"
    if not page.exists():
        return False
    built = page.stat().st_mtime
    return all(f.stat().st_mtime <= built for f in _inputs_of_target())


def _build_target_only(out: Path) -> Path:
    """Build TARGET alone with the book's _config.yml; return the html folder."""
    subprocess.run([sys.executable, str(ROOT / "tools" / "vendor_static.py")], check=True, cwd=ROOT)
    toc = out / "_toc.yml"
    toc.write_text(f"format: jb-book\nroot: {TARGET}\n")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(ROOT), "--toc", str(toc), "--path-output", str(out), "--keep-going"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    html = out / "_build" / "html"
    if run.returncode != 0 or not (html / f"{TARGET}.html").exists():
        pytest.fail(f"building {TARGET} failed (rc={run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return html


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory) -> Path:
    built = ROOT / "_build" / "html"
    if _fresh_page(built):
        return built
    if shutil.which("npm") is None and not (ROOT / "vendor_static" / "VERSIONS").exists():
        message = "building the page needs npm for the site's JavaScript (tools/vendor_static.py): install Node.js"
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return _build_target_only(tmp_path_factory.mktemp("site"))


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server(site_dir):
    """A static web server for the built site on 127.0.0.1 (loopback only)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(site_dir)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser(browser_path, server):
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    chrome = Chromium(browser_path, profile)
    try:
        for domain in ("Network", "Page", "Runtime"):
            chrome.send(f"{domain}.enable")
        chrome.send("Page.navigate", url=f"{server}/{TARGET}.html")
        chrome.wait_for("document.readyState === 'complete'")
        yield chrome
    finally:
        chrome.close()
        shutil.rmtree(profile, ignore_errors=True)


# ------------------------------------------------------------------------------------ the checks

# The first frame_slider: a slider (noUi) whose widget box also holds the frames' image.
FIND_SLIDER = """(() => {
  for (const track of document.querySelectorAll('.noUi-target')) {
    const box = track.closest('.widget-vbox');
    if (box && box.querySelector('img.widget-image')) { return [track, box]; }
  }
  return null;
})()"""

VISIBLE_FRAME_SHA256 = (
    """(async () => {
  const [track, box] = %s;
  const imgs = [...box.querySelectorAll('img.widget-image')].filter(i => i.offsetParent !== null);
  if (imgs.length !== 1) { return 'visible images: ' + imgs.length; }
  const bytes = await (await fetch(imgs[0].src)).arrayBuffer();
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [...new Uint8Array(digest)].map(b => b.toString(16).padStart(2, '0')).join('');
})()"""
    % FIND_SLIDER
)


@pytest.mark.browser
@pytest.mark.slow
@browser_test
def test_math_is_typeset_by_local_mathjax(browser):
    n_math = browser.js("document.querySelectorAll('.math').length")
    assert n_math > 0, f"{TARGET} has no math to check"
    browser.wait_for("window.MathJax && MathJax.startup && MathJax.startup.promise && true")
    browser.js("MathJax.startup.promise.then(() => true)", await_promise=True)
    rendered = browser.wait_for(
        "[...document.querySelectorAll('.math')].every(m => m.querySelector('mjx-container')) && "
        "document.querySelectorAll('mjx-container').length"
    )
    assert rendered >= n_math
    src = browser.js("[...document.scripts].map(s => s.src).find(s => s.includes('tex-chtml')) || ''")
    assert src.startswith("http://127.0.0.1:"), f"MathJax came from {src!r}"


@pytest.mark.browser
@pytest.mark.slow
@browser_test
def test_frame_slider_changes_the_picture_without_a_kernel(browser):
    browser.wait_for(f"{FIND_SLIDER} !== null")
    before = browser.js(VISIBLE_FRAME_SHA256, await_promise=True)
    assert len(before) == 64, before
    position = browser.js(f"""(() => {{
      const [track] = {FIND_SLIDER};
      const s = track.noUiSlider;
      track.scrollIntoView({{block: 'center'}});
      track.querySelector('.noUi-handle').focus();
      return [Number(s.get()), s.options.range.min, s.options.range.max];
    }})()""")
    value, low, high = position
    assert high > low, f"the slider has a single frame: {position}"
    key, code = ("ArrowRight", 39) if value < high else ("ArrowLeft", 37)
    browser.key(key, code)  # a real key press on the focused handle, as a reader would do
    moved = browser.wait_for(
        f"(v => v !== {value} ? String(v) : null)(Number(({FIND_SLIDER})[0].noUiSlider.get()))", timeout=10
    )
    after, deadline = before, time.monotonic() + 10
    while time.monotonic() < deadline:  # the widget swaps the frame asynchronously
        after = browser.js(VISIBLE_FRAME_SHA256, await_promise=True)
        if after != before:
            break
        time.sleep(0.25)
    if os.environ.get("SITE_TEST_SCREENSHOT"):
        browser.screenshot(Path(os.environ["SITE_TEST_SCREENSHOT"]))
    assert len(after) == 64, after
    assert after != before, f"slider moved {value} -> {moved} but the picture did not change"


@pytest.mark.browser
@pytest.mark.slow
@browser_test
def test_no_request_leaves_the_machine(browser):
    browser.js("new Promise(r => setTimeout(() => r(true), 1000))", await_promise=True)  # late loads
    urls = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert any(u.endswith(f"{TARGET}.html") for u in urls), "the page itself was not requested"
    outside = []
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme in NON_NETWORK_SCHEMES:
            continue
        if parts.hostname not in LOCAL_HOSTS:
            outside.append(url)
    assert outside == [], f"{len(outside)} request(s) left the machine: {outside[:10]}"


@pytest.mark.browser
@pytest.mark.slow
@browser_test
def test_every_local_file_the_page_asks_for_exists(browser):
    url_of = {
        e["params"]["requestId"]: e["params"]["request"]["url"]
        for e in browser.events
        if e.get("method") == "Network.requestWillBeSent"
    }
    broken = []
    for e in browser.events:
        p = e.get("params", {})
        if e.get("method") == "Network.responseReceived" and p["response"]["status"] >= 400:
            broken.append((p["response"]["status"], p["response"]["url"]))
        elif e.get("method") == "Network.loadingFailed" and not p.get("canceled"):
            broken.append((p.get("errorText"), url_of.get(p.get("requestId"), "?")))
    # Chromium asks every server for /favicon.ico on its own; the book has none.
    broken = [b for b in broken if not str(b[1]).endswith("/favicon.ico")]
    assert broken == [], broken


@pytest.mark.browser
@pytest.mark.slow
@browser_test
def test_page_scripts_raise_no_errors(browser):
    errors = [e["params"]["exceptionDetails"] for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]
    described = [d.get("exception", {}).get("description", d.get("text", ""))[:300] for d in errors]
    assert described == [], described


# ------------------------------------------- every chapter page says what produced its numbers (make test-site)

PROVENANCE = re.compile(
    r'<p class="book-provenance"[^>]*>Numbers on this page: '
    r"(computed \d{4}-\d\d-\d\d \d\d:\d\d UTC|not executed in this build), from "
    r'(commit <a href="[^"]+/commit/[0-9a-f]{40}"><code>[0-9a-f]{12}</code></a>( with uncommitted changes)?'
    r"|a source tree outside git), with torch [^,]+, CPU capability [A-Z0-9_]+, \d+ threads, device [^.]+\."
)


@pytest.mark.site
def test_every_chapter_page_has_its_provenance_line():
    from devtools import no_built_site

    html_dir = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html"))
    chapters = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not (html_dir / "index.html").is_file():
        no_built_site(f"no built site at {html_dir}: run `make book` first")
    for notebook in chapters:
        page = (html_dir / "notebooks" / f"{notebook.stem}.html").read_text(encoding="utf-8")
        assert len(PROVENANCE.findall(page)) == 1, f"{notebook.stem}: no (or more than one) provenance line"
        at = page.index('class="book-provenance"')
        assert "cell docutils" not in page[at:], f"{notebook.stem}: the provenance line is not at the page's foot"
    front = (html_dir / "book" / "intro.html").read_text(encoding="utf-8")
    assert "book-provenance" not in front, "only notebook pages compute numbers"
    for notebook in chapters:  # the Chinese edition says the same in its language: the same run, the same commit
        en, zh = (
            html_dir / "notebooks" / f"{notebook.stem}.html",
            html_dir / "zh" / "notebooks" / f"{notebook.stem}.html",
        )
        if not zh.is_file():
            no_built_site(f"no Chinese edition at {zh.parent.parent}: `make book` builds it")
        line = PROVENANCE_ZH.search(zh.read_text(encoding="utf-8"))
        assert line, f"zh/{notebook.stem}: no provenance line in Chinese"
        assert (line.group(1) or "outside git") in PROVENANCE.search(en.read_text(encoding="utf-8")).group(0), (
            notebook.stem
        )


PROVENANCE_ZH = re.compile(
    r'<p class="book-provenance"[^>]*>本页的数字：(?:计算于 \d{4}-\d\d-\d\d \d\d:\d\d UTC|本次构建中没有执行)，'
    r"来自(?:提交 <a [^>]+><code>([0-9a-f]{12})</code></a>|git 之外)[^。]*，"
    r"使用 torch [^、]+、CPU 能力 [A-Z0-9_]+、\d+ 个线程、设备 [^。]+。"
)


COLUMN = 100  # characters of monospace output the text column shows without a scroll bar


def _display_width(line: str) -> int:
    """Monospace columns a line takes: a CJK character is two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


@pytest.mark.site
def test_printed_output_fits_the_text_column():
    """No line a cell prints (a stream or a plain-text result) is wider than COLUMN in either edition: wide tables
    are rendered as tables, long sentences wrapped. Cells the book removes are not on the page, so not counted."""
    from bs4 import BeautifulSoup

    from devtools import no_built_site

    html_dir = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html"))
    if not (html_dir / "index.html").is_file():
        no_built_site(f"no built site at {html_dir}: run `make book` first")
    wide = []
    for page in sorted((html_dir / "notebooks").glob("*.html")) + sorted(
        (html_dir / "zh" / "notebooks").glob("*.html")
    ):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for output in soup.select("div.cell_output div.output.stream, div.cell_output div.output.text_plain"):
            wide += [
                f"{page.relative_to(html_dir)}: {_display_width(line)} wide: {line[:80]}"
                for line in output.get_text().split("\n")
                if _display_width(line) > COLUMN
            ]
    assert not wide, f"{len(wide)} printed lines wider than {COLUMN}:\n" + "\n".join(wide[:40])
