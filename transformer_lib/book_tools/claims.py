"""Sentences bound to measurements: a number in prose comes from the kernel, a comparison is checked.

Used in chapters 00, 01, 02, 03, 04, 05, 06, 07, 08, 09, 10, 11 and 12.

A chapter states a measured number through myst-nb's ``glue`` (``glue_number``: glued for the book *and*
returned, so the cell can print it for readers of the notebook, where glue roles do not render) and guards each
comparison in its prose with ``claim`` in a hidden cell (tag ``remove-cell``) right after the measurement::

    ratio = glue_number("cache_speedup", t_full / t_cached)   # markdown: {glue:text}`cache_speedup:.1f`
    claim(ratio > 1.3, "the cache decodes at least 1.3x faster")

What a false sentence does depends on one variable, ``BOOK_CLAIMS`` (``mode()``):

* ``strict``: the cell raises ``AssertionError("claim no longer holds: <sentence>")``, so the book build
  (``jupyter-book build -W``) and the notebook tests (``pytest --nbval-lax``) fail and print the sentence.
  ``make test``, ``make test-all``, ``.ci/run`` and the workflows set it; it is also the default when ``CI=true``.
* ``report`` (the default anywhere else: a reader's ``make book``, Jupyter, Colab): the notebook runs on, and the
  cell displays a box that quotes the sentence and the values it was checked on (``values=``, or else the numbers
  glued since the previous check). The box is an HTML output (Jupyter and Colab show it) carrying a record of
  MIME type ``FAILED_CLAIM_MIME``; the book's Sphinx extension (tools/book_fixes.py) shows it even in a cell
  tagged ``remove-cell``, puts a banner at the top of the page that links to it, and lists it at the end of the
  build.
"""

from __future__ import annotations

import html
import json
import math
import os

import numpy as np
import torch

from ..utils.checks import check_choice, check_equal, check_int, check_number, check_type

PREFIX = "claim no longer holds: "
MODE_ENV = "BOOK_CLAIMS"
MODES = ("strict", "report")
FAILED_CLAIM_MIME = "application/vnd.transformer-book.failed-claim+json"
CHOICE_KEY_SUFFIX = "__key"  # glue_choice also glues its key as <name>__key, for translations (book/_ext/glue_i18n.py)
BOX_CLASS = "book-check-failed"  # tools/book_fixes.py finds the boxes on a page by this class

_glued_since_check: dict[str, object] = {}  # name -> value glued since the last claim: what the next one checks


def mode(environ=None) -> str:
    """``"strict"`` or ``"report"``: ``BOOK_CLAIMS`` when set, else ``"strict"`` under ``CI=true`` (GitHub Actions and
    most CI services set it) and ``"report"`` everywhere else. Any other value of ``BOOK_CLAIMS`` is an error."""
    environ = os.environ if environ is None else environ
    value = environ.get(MODE_ENV, "").strip().lower()
    if value:
        return check_choice(MODE_ENV, value, MODES)
    return "strict" if environ.get("CI", "").strip().lower() in ("true", "1", "yes") else "report"


def _as_bool(condition, name: str = "condition") -> bool:
    """``condition`` as a Python bool; a ``TypeError`` for anything that is not a single truth value."""
    if isinstance(condition, (bool, np.bool_)):
        return bool(condition)
    if isinstance(condition, torch.Tensor) and condition.dtype == torch.bool and condition.dim() == 0:
        return bool(condition.item())
    if isinstance(condition, np.ndarray) and condition.dtype == np.bool_ and condition.ndim == 0:
        return bool(condition)
    got = (
        f"a {condition.dtype} tensor of shape {tuple(condition.shape)}"
        if isinstance(condition, torch.Tensor)
        else f"an array of dtype {condition.dtype} and shape {condition.shape}"
        if isinstance(condition, np.ndarray)
        else f"{type(condition).__name__} {condition!r}"
    )
    raise TypeError(
        f"{name} must be a single truth value (bool, numpy bool or 0-dim bool tensor), got {got}; "
        f"write the comparison out, e.g. claim(bool((x > 0).all()), ...)"
    )


def claim(condition, sentence: str, values: dict | None = None) -> None:
    """Check that the measurement still supports ``sentence`` (the prose it guards, quoted as printed).

    ``values`` (optional, name -> number) are the measurements the condition compares; without it, the report
    quotes the numbers glued (``glue_number``) since the previous check. When ``condition`` is false: in strict
    mode (``mode()``) raises ``AssertionError("claim no longer holds: <sentence>")``; in report mode displays a box
    quoting the sentence and those values, and returns. A ``TypeError`` when ``condition`` is not a single truth
    value (a tensor of many elements, a float, None, ...), in either mode.
    """
    check_type("sentence", sentence, str, expected="the sentence the claim guards (a str)")
    check_int("len(sentence.strip())", len(sentence.strip()), min=1, note="the sentence the claim guards, not blank")
    check_type(
        "values", values, dict, expected="a dict of name -> value", optional="the numbers glued since the last check"
    )
    holds = _as_bool(condition)
    checked = dict(_glued_since_check) if values is None else dict(values)
    _glued_since_check.clear()
    current = mode()  # an invalid BOOK_CLAIMS fails every claim, true or false
    _record(sentence, holds)
    if holds:
        return
    if current == "strict":
        raise AssertionError(PREFIX + sentence)
    _display_failure(sentence, checked)


def _show(value) -> str:
    if isinstance(value, float):
        return format(value, ".4g")
    return str(value)


def failure_html(sentence: str, values: dict, ran_on: bool = True) -> str:
    """The box a failed claim shows (inline styles: Jupyter and Colab have no book CSS). ``ran_on``: report mode
    (the notebook went on); else strict mode stopped the notebook at the check (the book's extension shows it)."""
    shown = "; ".join(f"<code>{html.escape(str(k))}</code> = {html.escape(_show(v))}" for k, v in values.items())
    checked = f'<p style="margin:0.3em 0">Checked on: {shown}.</p>' if shown else ""
    return (
        f'<div class="{BOX_CLASS}" data-sentence="{html.escape(sentence, quote=True)}" role="note" '
        'style="border:2px solid #b3261e;border-left-width:8px;background:#fdecea;color:#3b0a07;'
        'padding:0.6em 1em;margin:0.8em 0;border-radius:4px">'
        '<p style="margin:0 0 0.3em 0"><strong>A measurement on this machine does not support this sentence:'
        f"</strong> &ldquo;{html.escape(sentence)}&rdquo;</p>{checked}"
        '<p style="margin:0.3em 0 0 0;font-size:90%">The check behind it failed when this page was computed; '
        + (
            "the notebook ran on (report mode), so the numbers around it are this machine's, and the sentence "
            "above them may not hold for them.</p></div>"
            if ran_on
            else "the notebook stopped here (strict mode): what follows on this page is missing.</p></div>"
        )
    )


def _display_failure(sentence: str, values: dict) -> None:
    record = {"sentence": sentence, "values": {str(k): _jsonable(v) for k, v in values.items()}}
    text = f"A measurement on this machine does not support this sentence: {sentence!r}" + (
        f" (checked on: {', '.join(f'{k} = {_show(v)}' for k, v in values.items())})" if values else ""
    )
    bundle = {"text/plain": text, "text/html": failure_html(sentence, values), FAILED_CLAIM_MIME: record}
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python without IPython: say it on stdout
        print(text)
        return
    if get_ipython() is None:
        print(text)
    else:
        display(bundle, raw=True)


def _jsonable(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value if not (isinstance(value, float) and not math.isfinite(value)) else str(value)
    return str(value)


def _record(sentence: str, holds: bool) -> None:
    """Append ``{"sentence", "holds"}`` as a JSON line to the file named by ``BOOK_CLAIMS_LOG``, when it is set: the
    perturbation tool reads every claim's verdict from it."""
    path = os.environ.get("BOOK_CLAIMS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"sentence": sentence, "holds": holds}) + "\n")


GLUE_PREFIX = "application/papermill.record/"  # myst-nb's MIME prefix of a value glued without display


def glue(name: str, value, display: bool = True) -> None:
    """Store ``value``'s display under ``name`` in the cell's outputs, where myst-nb's glue roles read it: what
    ``myst_nb.glue(name, value, display)`` outputs (``tests/book_tools/test_claims.py`` compares the two), written here
    because importing myst-nb pulls in docutils and Sphinx, about 2 s of CPU in every chapter's kernel."""
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipy_display

    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = dict(name=name, mime_prefix=prefix)
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def glue_number(name: str, value, fmt: str | None = None):
    """Glue ``value`` under ``name`` for the book's prose (``{glue:text}`name``` or ``name:.2f``) and return it.

    ``value`` is a real number (Python, numpy, or a one-element tensor, which is converted with ``.item()``).
    With ``fmt`` (e.g. ``".1f"``, ``","``) the *formatted string* is glued, so ``{glue:text}`name``` shows it
    as is; the number itself is returned either way, so the notebook can print it (Colab and Jupyter show the
    printed output, not the glue role).
    """
    check_type("name", name, str, expected="an identifier-like str (letters, digits, _)")
    if not name.isidentifier():  # no helper checks a string's form
        raise ValueError(f"name must be an identifier-like string (letters, digits, _), got {name!r}")
    if isinstance(value, torch.Tensor):
        check_equal("value.numel()", value.numel(), 1, note=f"a single number; value has shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, np.generic):  # a NumPy scalar: its Python number (np.bool_ -> bool, refused below)
        value = value.item()
    check_number(f"value glued as {name!r}", value)  # a finite real number, not a bool; ints stay ints
    _glued_since_check[name] = value
    glue(name, format(value, fmt) if fmt is not None else value, display=False)
    return value


def glue_choice(name: str, key: str, words: dict[str, str]) -> str:
    """Glue the word that a measurement chose: ``words[key]`` under ``name``, and return ``key``.

    The prose writes ``{glue:text}`name``` where the word goes, so the sentence follows the measurement; ``key``
    (``"faster"``, ``"within_noise"``, ...) is what a translation maps to its own word: it is glued too, as
    ``name + CHOICE_KEY_SUFFIX``, which a translated sentence reads with ``{glue:choice}`name|key=word|...```.
    """
    check_type("words", words, dict, expected="a dict of key -> word")
    check_choice(f"the key glued as {name!r}", key, words)
    glue(name, words[key], display=False)
    glue(name + CHOICE_KEY_SUFFIX, key, display=False)
    _glued_since_check[name] = words[key]
    return key


def glue_ratio(name: str, ratio):
    """Glue a measured ratio (a ``timing.Ratio``) as four numbers, so a sentence in any language can write it:
    the median as ``name``, its interval's ends as ``name_low`` and ``name_high``, and the interval's true
    coverage in percent as ``name_coverage`` (96.09375 over 9 rounds: write it ``:.1f``); return ``ratio``.

    The prose writes ``{glue:text}`name:.2f`x ({glue:text}`name_low:.2f`-{glue:text}`name_high:.2f`,
    {glue:text}`name_coverage:.1f`% interval)`` in its own words (``str(ratio)`` would glue English into every edition).
    """
    glue_number(f"{name}_low", ratio.low), glue_number(f"{name}_high", ratio.high)
    glue_number(f"{name}_coverage", 100 * ratio.coverage)
    glue_number(name, ratio.ratio)
    return ratio


def claim_verdict(ratio, verdict: str, sentence: str) -> None:
    """Check a timing comparison against its interval: ``ratio.verdict()`` (a ``timing.Ratio``) must be
    ``verdict`` (``"faster"``, ``"slower"`` or ``"within_noise"``). The interval is quoted when it fails."""
    check_choice("verdict", verdict, ("faster", "slower", "within_noise"))
    claim(ratio.verdict() == verdict, f"{sentence} [measured {ratio}: {ratio.verdict()}]")
