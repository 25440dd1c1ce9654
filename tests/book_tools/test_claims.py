"""``claim`` checks a sentence against its measurement; ``glue_number`` glues a number and hands it back.

Fast tests check the helper against plain Python truth, and the two modes (``BOOK_CLAIMS``): strict raises, report
displays a box and goes on. The ``slow`` tests build a one-page Jupyter Book with the book's own Sphinx extension
(tools/book_fixes.py) and run nbval on a notebook that states a claim, once true and once false: in strict mode the
false one fails both, with the sentence in the output; in report mode the build passes and the page (its HTML is
read) shows the box at the claim, a banner at the top linking to it, the provenance line, and the build's last
lines list the claim. A cell that raises anything else fails the build in report mode too, with a banner saying
which cell failed. The execution cache: a second build executes nothing; a change to the library re-executes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from transformer_lib.book_tools import claims
from transformer_lib.book_tools.claims import claim, glue_number

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _strict_unless_a_test_says_otherwise(monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "strict")


@pytest.mark.parametrize(
    "condition", [True, np.bool_(True), torch.tensor(True), np.array(True), torch.tensor([1.0, 2.0]).lt(3).all(), 2 > 1]
)
def test_claim_passes_silently_when_the_condition_holds(condition):
    assert claim(condition, "the sentence") is None


@pytest.mark.parametrize(
    "condition", [False, np.bool_(False), torch.tensor(False), 1 > 2, torch.tensor([1.0, 5.0]).lt(3).all()]
)
def test_false_claim_raises_with_the_sentence_it_guards(condition, monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    with pytest.raises(AssertionError) as err:
        claim(condition, "the cached decoder is at least 1.3x faster")
    assert str(err.value) == "claim no longer holds: the cached decoder is at least 1.3x faster"


@pytest.mark.parametrize(
    "condition, got",
    [
        (torch.tensor([True, False]), r"torch.bool tensor of shape \(2,\)"),
        (torch.tensor(1.0), r"torch.float32 tensor of shape \(\)"),
        (np.array([True, True]), r"array of dtype bool and shape \(2,\)"),
        (1.0, "float 1.0"),
        (1, "int 1"),
        (None, "NoneType None"),
        ("yes", "str 'yes'"),
    ],
)
def test_claim_refuses_anything_but_one_truth_value(condition, got):
    # an int or a float would be truthy by accident: 0.3 passes where "ratio > 0.3" was meant
    with pytest.raises(TypeError, match="condition must be a single truth value .*got .*" + got):
        claim(condition, "a sentence")


@pytest.mark.parametrize(
    "sentence, err, match",
    [
        ("", ValueError, r"len\(sentence.strip\(\)\) must be an int >= 1 \(the sentence the claim guards, not blank\)"),
        ("   ", ValueError, r"len\(sentence.strip\(\)\) must be an int >= 1"),
        (None, TypeError, r"sentence must be the sentence the claim guards \(a str\), got NoneType"),
        (3, TypeError, r"sentence must be the sentence the claim guards \(a str\), got int 3"),
    ],
)
def test_claim_needs_the_sentence_it_guards(sentence, err, match):
    with pytest.raises(err, match=match):
        claim(True, sentence)


def test_claim_refuses_values_that_are_not_a_dict():
    with pytest.raises(TypeError, match=r"values must be a dict of name -> value or None .*got list \[1\]"):
        claim(True, "a sentence", values=[1])


@pytest.mark.parametrize(
    "value, expected",
    [
        (3, 3),
        (2.5, 2.5),
        (np.float32(0.25), 0.25),
        (np.int64(7), 7),
        (torch.tensor(4.0), 4.0),
        (torch.tensor([[9]]), 9),
    ],
)
def test_glue_number_returns_the_number_as_a_python_scalar(value, expected):
    got = glue_number("n", value)
    assert got == expected and type(got) in (int, float)


@pytest.mark.parametrize("value", [0.125, 7, "1.5x", "faster than the loop"])
@pytest.mark.parametrize("display", [False, True])
def test_glue_outputs_what_myst_nb_glue_outputs(value, display, monkeypatch):
    """The independent reference: myst-nb's own ``glue``, whose outputs its roles read in the book build."""
    import myst_nb.ext.glue

    outputs = {}
    for where, fn in (("myst_nb.ext.glue.ipy_display", myst_nb.glue), ("IPython.display.display", claims.glue)):
        monkeypatch.setattr(where, lambda *args, fn=fn, **kwargs: outputs.setdefault(fn, (args, kwargs)))
        fn("ratio", value, display=display)
    assert outputs[claims.glue] == outputs[myst_nb.glue]


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        np.float32("nan"),
        np.float64("inf"),
        torch.tensor(float("nan")),
        torch.tensor([-float("inf")]),
        torch.tensor(float("inf"), dtype=torch.bfloat16),
    ],
)
def test_glue_number_refuses_nan_and_infinity_naming_the_key(value, monkeypatch):
    glued = []
    monkeypatch.setattr("transformer_lib.book_tools.claims.glue", lambda *args, **kwargs: glued.append(args))
    with pytest.raises(ValueError, match=r"value glued as 'speedup' must be a finite number, got (nan|inf|-inf)"):
        glue_number("speedup", value)
    assert glued == []  # nothing reached the prose


@pytest.mark.parametrize(
    "name, value, err, match",
    [
        (
            "n",
            torch.ones(2),
            ValueError,
            r"value.numel\(\) must be 1 \(a single number; value has shape \(2,\)\), got 2",
        ),
        ("n", "12", TypeError, "value glued as 'n' must be a finite number, got str '12'"),
        ("n", True, TypeError, "value glued as 'n' must be a finite number, got bool True"),
        ("n", np.bool_(True), TypeError, "value glued as 'n' must be a finite number, got bool True"),
        ("n-2", 1, ValueError, "name must be an identifier"),
        (2, 1, TypeError, "name must be an identifier-like str"),
    ],
)
def test_glue_number_rejects_what_prose_cannot_show(name, value, err, match):
    with pytest.raises(err, match=match):
        glue_number(name, value)


# ------------------------------------------------------------------------------------- the two modes


@pytest.mark.parametrize(
    "environ, expected",
    [
        ({}, "report"),
        ({"CI": "true"}, "strict"),
        ({"CI": "false"}, "report"),
        ({"BOOK_CLAIMS": "strict"}, "strict"),
        ({"BOOK_CLAIMS": "report", "CI": "true"}, "report"),
        ({"BOOK_CLAIMS": " Strict "}, "strict"),
        ({"BOOK_CLAIMS": "", "CI": "true"}, "strict"),
    ],
)
def test_mode_is_book_claims_else_strict_under_ci_else_report(environ, expected):
    assert claims.mode(environ) == expected


def test_a_misspelt_mode_fails_every_claim_naming_the_variable(monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "strcit")
    with pytest.raises(ValueError, match=r"BOOK_CLAIMS must be one of \['report', 'strict'\], got 'strcit'"):
        claim(True, "a sentence that holds")


def test_report_mode_shows_the_sentence_and_the_values_glued_since_the_last_check(monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    monkeypatch.setattr("transformer_lib.book_tools.claims.glue", lambda *args, **kwargs: None)
    shown = []
    monkeypatch.setattr(claims, "_display_failure", lambda sentence, values: shown.append((sentence, values)))
    glue_number("before", 1.0)
    claim(True, "an earlier check")  # what it was checked on is not the next check's
    glue_number("ratio", 0.93)
    glue_number("steps", 12)
    assert claim(False, "the cache is at least 1.3x faster") is None  # no exception: the notebook runs on
    claim(False, "an explicit check", values={"t_cached": 0.5})
    assert shown == [
        ("the cache is at least 1.3x faster", {"ratio": 0.93, "steps": 12}),
        ("an explicit check", {"t_cached": 0.5}),
    ]
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    with pytest.raises(AssertionError, match="claim no longer holds: the same sentence, strict"):
        claim(False, "the same sentence, strict")


def test_the_report_box_quotes_the_sentence_and_values_escaped():
    box = claims.failure_html('ratio < 2 & "fast"', {"ratio": 2.345678, "name": "<b>"})
    assert f'class="{claims.BOX_CLASS}"' in box
    assert 'data-sentence="ratio &lt; 2 &amp; &quot;fast&quot;"' in box
    assert "&ldquo;ratio &lt; 2 &amp; &quot;fast&quot;&rdquo;" in box
    assert "<code>ratio</code> = 2.346" in box and "&lt;b&gt;" in box and "<b>" not in box
    assert "ran on" in box and "stopped here" in claims.failure_html("s", {}, ran_on=False)


def test_report_mode_displays_an_html_box_with_a_record_in_a_kernel(monkeypatch):
    """In IPython (Jupyter, Colab, the book's kernel) the box is one display output: HTML, text and the record."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    published = []
    monkeypatch.setattr(shell.display_pub, "publish", lambda data, metadata=None, **kw: published.append(data))
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    claim(False, "a sentence", values={"x": 3})
    assert len(published) == 1
    bundle = published[0]
    assert bundle[claims.FAILED_CLAIM_MIME] == {"sentence": "a sentence", "values": {"x": 3}}
    assert claims.BOX_CLASS in bundle["text/html"] and "a sentence" in bundle["text/plain"]


# ------------------------------------------------------------- a false claim fails the book and nbval

SENTENCE = "the measured count is larger than five"
REPO = "https://github.com/someone/tiny-book"  # the tiny book's repository.url (never contacted)
FAILURE = "an unexpected failure"


def _notebook(folder: Path, threshold: int, error: bool = False) -> Path:
    """One chapter: a set-up cell, a measurement (from a small library beside it) glued into a sentence, a hidden
    claim (true iff 7 > threshold), a cell after it, and optionally a visible cell that raises."""

    def cell(kind, source, tags=()):
        c = {"cell_type": kind, "metadata": {"tags": list(tags)} if tags else {}, "source": source}
        return c if kind == "markdown" else {**c, "execution_count": None, "outputs": []}

    cells = [
        cell("markdown", "# A claim\n"),
        cell("code", f'SOURCE = "git+{REPO}@main"  # the set-up cell\'s pip source\n', tags=["setup"]),
        cell(
            "code",
            "import tinylib\nfrom transformer_lib.book_tools.claims import claim, glue_number\n"
            "count = glue_number('count', tinylib.COUNT)\nprint('count:', count)\n",
        ),
        cell("markdown", "The count is {glue:text}`count`, so " + SENTENCE + ".\n"),
        cell("code", f"claim(count > {threshold}, {SENTENCE!r})\n", tags=["remove-cell"]),
        cell("code", "print('after' + ' the claim')\n"),
    ]
    if error:
        cells.append(cell("code", f"raise ValueError({FAILURE!r})\n"))
    cells.append(cell("markdown", "The end.\n"))
    for i, c in enumerate(cells):
        c["id"] = f"cell-{i}"
    nb = {
        "cells": cells,
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    }
    (folder / "tinylib.py").write_text("COUNT = 7\n")
    path = folder / "claim.ipynb"
    path.write_text(json.dumps(nb))
    return path


def _book(folder: Path, threshold: int, error: bool = False) -> Path:
    """A one-page book with the project's execution settings and Sphinx extension, in a git repository."""
    project = yaml.safe_load((ROOT / "_config.yml").read_text())
    config = {
        "title": "claim test",
        "only_build_toc_files": True,
        "execute": project["execute"],
        "repository": {"url": REPO, "branch": "main", "path_to_book": ""},
        "launch_buttons": {"colab_url": "https://colab.research.google.com", "thebe": False},
        "sphinx": {
            "local_extensions": {"book_fixes": str(ROOT / "tools")},
            "config": {
                "nb_execution_show_tb": project["sphinx"]["config"]["nb_execution_show_tb"],
                "book_cache_inputs": ["tinylib.py"],
            },
        },
    }
    (folder / "_config.yml").write_text(yaml.safe_dump(config))
    (folder / "_toc.yml").write_text("format: jb-book\nroot: claim\n")
    _notebook(folder, threshold, error)
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "tiny book"], check=True)
    return folder


def _commit(folder: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _run(cmd: list[str], cwd: Path, mode: str = "strict") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "BOOK_CLAIMS": mode}
    env.pop("CI", None)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _build(book: Path, mode: str) -> tuple[int, str, str]:
    """Build ``book`` as ``make book`` does; (exit status, log without colours, the page's HTML)."""
    done = _run([str(BIN / "jupyter-book"), "build", str(book), "-W", "-n", "--keep-going"], book.parent, mode)
    log = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)
    page = book / "_build" / "html" / "claim.html"
    return done.returncode, log, page.read_text() if page.exists() else ""


def _text(page: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _element(page: str, marker: str) -> str:
    """The HTML of the <div> or <p> whose opening tag contains ``marker`` (up to its closing tag)."""
    start = page.index(marker)
    start = page.rindex("<", 0, start)
    tag = re.match(r"<(\w+)", page[start:]).group(1)
    depth, i = 0, start
    for m in re.finditer(rf"<(/?){tag}\b", page[start:]):
        depth += -1 if m.group(1) else 1
        if depth == 0:
            i = start + m.end()
            break
    return page[start : page.index(">", i) + 1]


def test_the_book_prints_tracebacks_of_failed_cells():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"].get("nb_execution_show_tb") is True, (
        "without nb_execution_show_tb a failed claim's sentence does not reach the build log"
    )


@pytest.mark.slow
@pytest.mark.parametrize("threshold, holds", [(5, True), (9, False)])
def test_a_false_claim_fails_the_book_build_in_strict_mode_and_prints_its_sentence(tmp_path, threshold, holds):
    (tmp_path / "book").mkdir()
    book = _book(tmp_path / "book", threshold)
    rc, log, page = _build(book, "strict")
    assert "execution mode 'force'" in log  # strict mode executes whatever the cache holds
    text = _text(page)
    assert "Numbers on this page: computed " in text, "no provenance line"
    if holds:
        assert rc == 0, log[-3000:]
        assert "The count is 7, so " + SENTENCE in text  # the glued number reached the prose
        assert "book-failure-banner" not in page and "book-check-failed" not in page
    else:
        assert rc != 0, log[-3000:]
        assert "claim no longer holds: " + SENTENCE in log, log[-3000:]
        # the page written by --keep-going is not silently blank after the check: a banner says so, with the box
        banner = _text(_element(page, "book-failure-banner"))
        assert "does not support one of this page's sentences" in banner and SENTENCE in banner
        assert "This page is incomplete" in banner and "AssertionError: claim no longer holds" in banner
        assert 'href="#failed-cell"' in page and 'id="failed-cell"' in page
        box = _text(_element(page, 'id="failed-claim-1"'))
        assert SENTENCE in box and "stopped here (strict mode)" in box
        assert "after the claim" not in text  # not executed: strict stopped at the check
        assert f"WARNING: claim: a measurement does not support: {SENTENCE}" in log


@pytest.mark.slow
def test_report_mode_shows_the_failed_claim_on_its_page_and_goes_on_and_the_cache_follows_the_library(tmp_path):
    (tmp_path / "book").mkdir()
    book = _book(tmp_path / "book", threshold=9)
    commit = _commit(book)
    rc, log, page = _build(book, "report")
    assert rc == 0, log[-3000:]  # report mode: the build passes
    assert "Executing notebook" in log, log[-3000:]
    # the box, at the claim, quoting the sentence and the values it was checked on
    box = _element(page, 'id="failed-claim-1"')
    assert "does not support this sentence" in _text(box) and SENTENCE in _text(box)
    assert "Checked on: count = 7." in _text(box)
    assert page.index("The count is") < page.index('id="failed-claim-1"') < page.index("after the claim")
    # the banner at the top links to it; the notebook ran on
    banner = _element(page, "book-failure-banner")
    assert 'href="#failed-claim-1"' in banner and SENTENCE in _text(banner)
    assert "incomplete" not in _text(banner)
    assert page.index("book-failure-banner") < page.index("The count is")
    assert "after the claim" in _text(page)
    # the build's last lines list it
    tail = log[log.index("failed checks (1), mode BOOK_CLAIMS=report") :]
    assert f"claim: a measurement does not support: {SENTENCE}" in tail and "WARNING:" not in tail
    # provenance: date, commit, torch build, CPU capability, threads, device
    line = _text(_element(page, "book-provenance"))
    assert re.search(r"computed \d{4}-\d\d-\d\d \d\d:\d\d UTC, from commit " + commit[:12], line), line
    assert torch.__version__ in line and f"CPU capability {torch.backends.cpu.get_cpu_capability()}" in line
    assert re.search(r"\d+ threads, device cpu", line) or "device cuda" in line, line
    # the set-up cell installs the commit the page was built from: on the page, in the download, on Colab
    assert f"{REPO}@{commit}" in _text(page) and f"{REPO}@main" not in _text(page)
    download = json.loads((book / "_build" / "html" / "_sources" / "claim.ipynb").read_text())
    assert f"{REPO}@{commit}" in "".join(download["cells"][1]["source"])
    assert f"https://colab.research.google.com/github/someone/tiny-book/blob/{commit}/claim.ipynb" in page
    executed = json.loads((book / "_build" / "jupyter_execute" / "claim.ipynb").read_text())
    assert f"{REPO}@main" in "".join(executed["cells"][1]["source"]), "what runs is the committed cell"

    # a second build without changes executes nothing
    rc, log, page = _build(book, "report")
    assert rc == 0 and "Executing notebook" not in log, log[-3000:]
    assert 'id="failed-claim-1"' in page

    # a change to the library (not to any code cell) empties the cache and re-executes: no stale number
    (book / "tinylib.py").write_text("COUNT = 3\n")
    rc, log, page = _build(book, "report")
    assert rc == 0, log[-3000:]
    assert "emptying the execution cache" in log and "Executing notebook" in log, log[-3000:]
    assert "The count is 3, so " in _text(page) and "Checked on: count = 3." in _text(page)


@pytest.mark.slow
def test_any_other_exception_fails_the_book_in_report_mode_with_a_banner_naming_the_cell(tmp_path):
    (tmp_path / "book").mkdir()
    book = _book(tmp_path / "book", threshold=5, error=True)
    rc, log, page = _build(book, "report")
    assert rc != 0, log[-3000:]
    assert "Executing notebook failed" in log
    banner = _text(_element(page, "book-failure-banner"))
    assert "This page is incomplete" in banner and f"ValueError: {FAILURE}" in banner, banner
    assert 'href="#failed-cell"' in page and 'id="failed-cell"' in page
    assert page.index('id="failed-cell"') > page.index("after the claim")  # the anchor is at the failed cell
    assert f"claim: the notebook stopped at a failed cell: ValueError: {FAILURE}" in log


@pytest.mark.slow
@pytest.mark.parametrize("threshold, holds, mode", [(5, True, "strict"), (9, False, "strict"), (9, False, "report")])
def test_a_false_claim_fails_nbval_in_strict_mode_and_prints_its_sentence(tmp_path, threshold, holds, mode):
    nb = _notebook(tmp_path, threshold)
    done = _run(
        [sys.executable, "-m", "pytest", str(nb), "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider", "-q"],
        tmp_path,
        mode,
    )
    log = done.stdout + done.stderr
    fails = not holds and mode == "strict"
    assert (done.returncode != 0) == fails, log[-3000:]
    assert ("claim no longer holds: " + SENTENCE in log) == fails, log[-3000:]


def test_claim_verdict_follows_the_timing_interval_and_quotes_it():
    from transformer_lib.book_tools.claims import claim_verdict
    from transformer_lib.book_tools.timing import ratio_from_times

    faster = ratio_from_times([0.5, 0.6, 0.4, 0.5, 0.55, 0.45], [1.0] * 6)
    claim_verdict(faster, "faster", "a is faster than b")
    with pytest.raises(AssertionError, match=r"a is slower than b \[measured 0\.5.*faster\]"):
        claim_verdict(faster, "slower", "a is slower than b")
    noisy = ratio_from_times([0.9, 1.1, 1.0, 0.95, 1.05, 1.2], [1.0] * 6)
    claim_verdict(noisy, "within_noise", "the two are within this run's noise")
    with pytest.raises(
        ValueError, match=r"verdict must be one of \['faster', 'slower', 'within_noise'\], got 'quicker'"
    ):
        claim_verdict(noisy, "quicker", "a is quicker")


def test_glue_choice_glues_the_chosen_word_and_returns_its_key():
    from transformer_lib.book_tools.claims import glue_choice

    words = {"faster": "faster than", "within_noise": "within this run's noise of"}
    assert glue_choice("speed_word", "within_noise", words) == "within_noise"
    with pytest.raises(
        ValueError, match=r"the key glued as 'speed_word' must be one of \['faster', 'within_noise'\], got 'slower'"
    ):
        glue_choice("speed_word", "slower", words)


def test_glue_ratio_glues_the_median_and_the_interval_ends_as_numbers(monkeypatch):
    import transformer_lib.book_tools.claims as C
    from transformer_lib.book_tools.timing import ratio_from_times

    glued = {}
    monkeypatch.setattr(C, "glue", lambda name, value, display=True: glued.__setitem__(name, value))
    r = ratio_from_times([0.5, 0.6, 0.4, 0.5, 0.55, 0.45, 0.52, 0.48, 0.5], [1.0] * 9)
    assert C.glue_ratio("speed", r) is r
    assert glued == {"speed": r.ratio, "speed_low": r.low, "speed_high": r.high, "speed_coverage": 96.09375}
    assert all(isinstance(v, float) for v in glued.values())  # numbers: no English words in any edition
    assert (glued["speed_low"], glued["speed"], glued["speed_high"]) == (0.45, 0.5, 0.55)  # 2nd, 5th, 8th of 9


def test_every_claim_verdict_is_logged_when_book_claims_log_is_set(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("BOOK_CLAIMS_LOG", str(log))
    claim(True, "one holds")
    with pytest.raises(AssertionError):
        claim(False, "two fails")
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    claim(False, "three fails, reported")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows == [
        {"sentence": "one holds", "holds": True},
        {"sentence": "two fails", "holds": False},
        {"sentence": "three fails, reported", "holds": False},
    ]
