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

from transformer_lib import claims
from transformer_lib.claims import claim, glue_number

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def _strict_unless_a_test_says_otherwise(monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "strict")


@pytest.mark.parametrize("condition", [True, np.bool_(True), torch.tensor(True), np.array(True),
                                       torch.tensor([1.0, 2.0]).lt(3).all(), 2 > 1])
def test_claim_passes_silently_when_the_condition_holds(condition):
    assert claim(condition, "the sentence") is None


@pytest.mark.parametrize("condition", [False, np.bool_(False), torch.tensor(False), 1 > 2,
                                       torch.tensor([1.0, 5.0]).lt(3).all()])
def test_false_claim_raises_with_the_sentence_it_guards(condition, monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    with pytest.raises(AssertionError) as err:
        claim(condition, "the cached decoder is at least 1.3x faster")
    assert str(err.value) == "claim no longer holds: the cached decoder is at least 1.3x faster"


@pytest.mark.parametrize("condition, got", [
    (torch.tensor([True, False]), r"torch.bool tensor of shape \(2,\)"),
    (torch.tensor(1.0), r"torch.float32 tensor of shape \(\)"),
    (np.array([True, True]), r"array of dtype bool and shape \(2,\)"),
    (1.0, "float 1.0"), (1, "int 1"), (None, "NoneType None"), ("yes", "str 'yes'"),
])
def test_claim_refuses_anything_but_one_truth_value(condition, got):
    # an int or a float would be truthy by accident: 0.3 passes where "ratio > 0.3" was meant
    with pytest.raises(TypeError, match="condition must be a single truth value .*got .*" + got):
        claim(condition, "a sentence")


@pytest.mark.parametrize("sentence", ["", "   ", None, 3])
def test_claim_needs_the_sentence_it_guards(sentence):
    with pytest.raises(TypeError, match="sentence must be the non-empty sentence"):
        claim(True, sentence)


@pytest.mark.parametrize("value, expected", [(3, 3), (2.5, 2.5), (np.float32(0.25), 0.25), (np.int64(7), 7),
                                             (torch.tensor(4.0), 4.0), (torch.tensor([[9]]), 9)])
def test_glue_number_returns_the_number_as_a_python_scalar(value, expected):
    got = glue_number("n", value)
    assert got == expected and type(got) in (int, float)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), np.float32("nan"), np.float64("inf"),
                                   torch.tensor(float("nan")), torch.tensor([-float("inf")]),
                                   torch.tensor(float("inf"), dtype=torch.bfloat16)])
def test_glue_number_refuses_nan_and_infinity_naming_the_key(value, monkeypatch):
    glued = []
    monkeypatch.setattr("myst_nb.glue", lambda *args, **kwargs: glued.append(args))
    with pytest.raises(ValueError, match=r"value glued as 'speedup' must be a finite number, got (nan|inf|-inf)"):
        glue_number("speedup", value)
    assert glued == []  # nothing reached the prose


@pytest.mark.parametrize("name, value, err, match", [
    ("n", torch.ones(2), ValueError, r"single number, got a tensor of shape \(2,\)"),
    ("n", "12", TypeError, "value must be a real number, got str"),
    ("n", True, TypeError, "value must be a real number, got bool"),
    ("n-2", 1, ValueError, "name must be an identifier"),
])
def test_glue_number_rejects_what_prose_cannot_show(name, value, err, match):
    with pytest.raises(err, match=match):
        glue_number(name, value)


# ------------------------------------------------------------------------------------- the two modes

@pytest.mark.parametrize("environ, expected", [
    ({}, "report"), ({"CI": "true"}, "strict"), ({"CI": "false"}, "report"),
    ({"BOOK_CLAIMS": "strict"}, "strict"), ({"BOOK_CLAIMS": "report", "CI": "true"}, "report"),
    ({"BOOK_CLAIMS": " Strict "}, "strict"), ({"BOOK_CLAIMS": "", "CI": "true"}, "strict"),
])
def test_mode_is_book_claims_else_strict_under_ci_else_report(environ, expected):
    assert claims.mode(environ) == expected


def test_a_misspelt_mode_fails_every_claim_naming_the_variable(monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "strcit")
    with pytest.raises(ValueError, match="BOOK_CLAIMS must be 'strict' or 'report', got 'strcit'"):
        claim(True, "a sentence that holds")


def test_report_mode_shows_the_sentence_and_the_values_glued_since_the_last_check(monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    monkeypatch.setattr("myst_nb.glue", lambda *args, **kwargs: None)
    shown = []
    monkeypatch.setattr(claims, "_display_failure", lambda sentence, values: shown.append((sentence, values)))
    glue_number("before", 1.0)
    claim(True, "an earlier check")  # what it was checked on is not the next check's
    glue_number("ratio", 0.93)
    glue_number("steps", 12)
    assert claim(False, "the cache is at least 1.3x faster") is None  # no exception: the notebook runs on
    claim(False, "an explicit check", values={"t_cached": 0.5})
    assert shown == [("the cache is at least 1.3x faster", {"ratio": 0.93, "steps": 12}),
                     ("an explicit check", {"t_cached": 0.5})]
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


def _notebook(folder: Path, threshold: int) -> Path:
    """One chapter: a measurement glued into a sentence, and a hidden claim (true iff 7 > threshold)."""
    def cell(kind, source, tags=()):
        c = {"cell_type": kind, "metadata": {"tags": list(tags)} if tags else {}, "source": source}
        return c if kind == "markdown" else {**c, "execution_count": None, "outputs": []}
    cells = [cell("markdown", "# A claim\n"),
             cell("code", "from transformer_lib.claims import claim, glue_number\n"
                          "count = glue_number('count', 7)\nprint('count:', count)\n"),
             cell("markdown", "The count is {glue:text}`count`, so " + SENTENCE + ".\n"),
             cell("code", f"claim(count > {threshold}, {SENTENCE!r})\n", tags=["remove-cell"])]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}}}
    path = folder / "claim.ipynb"
    path.write_text(json.dumps(nb))
    return path


def _book(folder: Path, threshold: int) -> Path:
    """A one-page book with the project's execution settings (including ``nb_execution_show_tb``)."""
    project = yaml.safe_load((ROOT / "_config.yml").read_text())
    config = {"title": "claim test", "only_build_toc_files": True, "execute": project["execute"],
              "sphinx": {"config": {"nb_execution_show_tb": project["sphinx"]["config"]["nb_execution_show_tb"]}}}
    (folder / "_config.yml").write_text(yaml.safe_dump(config))
    (folder / "_toc.yml").write_text("format: jb-book\nroot: claim\n")
    _notebook(folder, threshold)
    return folder


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_book_prints_tracebacks_of_failed_cells():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["config"].get("nb_execution_show_tb") is True, \
        "without nb_execution_show_tb a failed claim's sentence does not reach the build log"


@pytest.mark.slow
@pytest.mark.parametrize("threshold, holds", [(5, True), (9, False)])
def test_a_false_claim_fails_the_book_build_and_prints_its_sentence(tmp_path, threshold, holds):
    book = _book(tmp_path, threshold)
    done = _run([str(BIN / "jupyter-book"), "build", str(book), "-W", "-n", "--keep-going"], tmp_path)
    log = done.stdout + done.stderr
    if holds:
        assert done.returncode == 0, log[-3000:]
        text = re.sub(r"<[^>]+>", "", (book / "_build" / "html" / "claim.html").read_text())
        assert "The count is 7, so " + SENTENCE in text  # the glued number reached the prose
    else:
        assert done.returncode != 0, log[-3000:]
        assert "claim no longer holds: " + SENTENCE in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("threshold, holds", [(5, True), (9, False)])
def test_a_false_claim_fails_nbval_and_prints_its_sentence(tmp_path, threshold, holds):
    nb = _notebook(tmp_path, threshold)
    done = _run([sys.executable, "-m", "pytest", str(nb), "--nbval-lax", "--nbval-current-env",
                 "-p", "no:cacheprovider", "-q"], tmp_path)
    log = done.stdout + done.stderr
    assert (done.returncode == 0) == holds, log[-3000:]
    assert ("claim no longer holds: " + SENTENCE in log) == (not holds), log[-3000:]


def test_claim_verdict_follows_the_timing_interval_and_quotes_it():
    from transformer_lib.claims import claim_verdict
    from transformer_lib.timing import ratio_from_times

    faster = ratio_from_times([0.5, 0.6, 0.4, 0.5, 0.55, 0.45], [1.0] * 6)
    claim_verdict(faster, "faster", "a is faster than b")
    with pytest.raises(AssertionError, match=r"a is slower than b \[measured 0\.5.*faster\]"):
        claim_verdict(faster, "slower", "a is slower than b")
    noisy = ratio_from_times([0.9, 1.1, 1.0, 0.95, 1.05, 1.2], [1.0] * 6)
    claim_verdict(noisy, "within_noise", "the two are within this run's noise")
    with pytest.raises(ValueError, match="verdict must be"):
        claim_verdict(noisy, "quicker", "a is quicker")


def test_glue_choice_glues_the_chosen_word_and_returns_its_key():
    from transformer_lib.claims import glue_choice

    words = {"faster": "faster than", "within_noise": "within this run's noise of"}
    assert glue_choice("speed_word", "within_noise", words) == "within_noise"
    with pytest.raises(KeyError, match="'slower' is not one of the words given for 'speed_word'"):
        glue_choice("speed_word", "slower", words)


def test_every_claim_verdict_is_logged_when_book_claims_log_is_set(tmp_path, monkeypatch):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("BOOK_CLAIMS_LOG", str(log))
    claim(True, "one holds")
    with pytest.raises(AssertionError):
        claim(False, "two fails")
    monkeypatch.setenv("BOOK_CLAIMS", "report")
    claim(False, "three fails, reported")
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert rows == [{"sentence": "one holds", "holds": True}, {"sentence": "two fails", "holds": False},
                    {"sentence": "three fails, reported", "holds": False}]
