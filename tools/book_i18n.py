"""The book's translated editions (issue 30; README, "Translating the book").

    python tools/book_i18n.py update            # extract the English messages, update locales/zh_CN/LC_MESSAGES/*.po
    python tools/book_i18n.py build             # English (_build/html) and Chinese (_build/html/zh), one execution
    python tools/book_i18n.py build --only zh_CN  # the Chinese edition only (the English one already built)
    python tools/book_i18n.py check [--release] # roles, links, code and math kept; --release: nothing fuzzy/missing

``update`` runs Sphinx's gettext builder (execution off: messages come from the Markdown cells, not from outputs)
into ``_build/gettext`` and ``sphinx-intl update``: a new English sentence arrives untranslated, a changed one keeps
its old translation marked ``#, fuzzy`` (the Chinese page shows the English sentence, with its live numbers, until
a translator rewrites the entry and removes the flag), a removed one goes to the end of the file as obsolete.

``build`` builds each edition with the options of ``make book`` (``-W -n --keep-going``) and the same execution
cache (``_build/.jupyter_cache``): a notebook executed for the English edition is read from the cache by the
Chinese one, so both show the numbers of the same run. The Chinese edition is built into ``_build/zh/html`` (its
own doctrees and ``jupyter_execute``, which myst-nb puts beside the output folder) and copied to
``_build/html/zh``. Both editions get the language switch (book/_ext/language_switch.py).

Where execution is forced (``BOOK_CLAIMS=strict``, and CI), tools/book_fixes.py executes every notebook of the English
edition whatever the cache holds; here it does so into an emptied cache (``book_execute_into_cache``) instead of
myst-nb's ``force`` mode, which writes no cache. The Chinese edition is then built in report mode with CI unset:
it reads that cache, and executes only what the cache lacks (nothing, after a successful English build).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
LOCALES = ROOT / "locales"
CACHE = BUILD / ".jupyter_cache"
EDITIONS = [{"code": "en", "path": "", "label": "English"}, {"code": "zh_CN", "path": "zh/", "label": "中文"}]
TITLES = {"zh_CN": "交互式 Transformer"}


def _sphinx(builder: str, outdir: Path, doctrees: Path, overrides: dict, toc: Path | None, strict: bool) -> int:
    from jupyter_book.sphinx import build_sphinx

    config = {
        "external_toc_path": str(toc or ROOT / "_toc.yml"),
        "latex_individualpages": False,
        "nitpicky": True,
        **overrides,
    }
    result = build_sphinx(
        ROOT,
        outdir,
        noconfig=True,
        path_config=str(ROOT / "_config.yml"),
        confoverrides=config,
        doctreedir=doctrees,
        builder=builder,
        warningiserror=strict,
        keep_going=strict,
    )
    return result if isinstance(result, int) else 1


def _title() -> str:
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text())["title"]


def edition_overrides(code: str) -> dict:
    overrides = {"book_languages": EDITIONS, "nb_execution_cache_path": str(CACHE), "book_execute_into_cache": True}
    if code != "en":
        overrides.update(language=code, html_title=TITLES.get(code, ""))
    return overrides


def build(codes: list[str], toc: Path | None) -> int:
    strict = toc is None  # a smaller table of contents leaves links to the missing pages: warnings, not errors
    for code in codes:
        start, cpu = time.monotonic(), _cpu()
        if code == "en":
            status = _sphinx("html", BUILD / "html", BUILD / ".doctrees", edition_overrides(code), toc, strict)
        else:
            # read the English edition's executions from the cache (see the module's docstring)
            os.environ["BOOK_CLAIMS"], os.environ["CI"] = "report", "false"
            out = BUILD / code.split("_")[0]
            status = _sphinx("html", out / "html", out / ".doctrees", edition_overrides(code), toc, strict)
            target = BUILD / "html" / _edition(code)["path"]
            if status == 0:
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(out / "html", target)
                (target / "404.html").unlink(missing_ok=True)  # GitHub Pages serves the site root's 404 page only
        print(
            f"{code}: built in {time.monotonic() - start:.0f} s wall, {_cpu() - cpu:.0f} s CPU "
            "(this process and its kernels)",
            flush=True,
        )
        if status:
            return status
    return 0


def _cpu() -> float:
    own, kids = os.times(), os.times()
    return own.user + own.system + kids.children_user + kids.children_system


def _edition(code: str) -> dict:
    return next(e for e in EDITIONS if e["code"] == code)


def update(codes: list[str], toc: Path | None) -> int:
    os.environ["BOOK_CLAIMS"], os.environ["CI"] = "report", "false"  # nothing to execute: see the docstring
    pot = BUILD / "gettext"
    overrides = {"nb_execution_mode": "off", "suppress_warnings": ["mystnb.glue"], "project": _title()}
    status = _sphinx("gettext", pot, BUILD / ".doctrees-gettext", overrides, toc, False)
    if status:
        return status
    for code in codes:
        status = subprocess.call(
            [sys.executable, "-m", "sphinx_intl", "update", "-p", str(pot), "-d", str(LOCALES), "-l", code]
        )
        if status:
            return status
    for path in LOCALES.rglob("*.po"):
        drop_format_flags(path)
    subprocess.call([sys.executable, "-m", "sphinx_intl", "stat", "-d", str(LOCALES)])  # exits 1 with any gap
    return 0


FORMAT_FLAGS = {"python-format", "python-brace-format"}


def drop_format_flags(path: Path) -> None:
    """Remove the ``python-format`` and ``python-brace-format`` flags that gettext's extractor guesses from a
    "95%" or a ``{glue}`` role in the English: these messages are prose, not format strings, and with the flag
    ``msgfmt --check`` rejects a faithful translation (Sphinx and this tool's check never format them)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.startswith("#,"):  # a flag line: "#, fuzzy, python-format"
            flags = [f.strip() for f in line[2:].split(",") if f.strip() and f.strip() not in FORMAT_FLAGS]
            if not flags:
                continue
            line = "#, " + ", ".join(flags) + "\n"
        lines.append(line)
    path.write_text("".join(lines), encoding="utf-8")


# ------------------------------------------------------------------------------------------ the check

ROLE = re.compile(r"\{[A-Za-z][\w:.-]*\}`[^`]*`")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\s][^$]*?\$", re.S)
# a cross-reference's text is prose (translated), its target is not: {doc}`the source articles <../book/sources>`
# is kept as {doc}`../book/sources`, whatever words the translation writes before the target
LINK_ROLE = re.compile(r"^(\{(?:doc|ref|numref|term|download)\})`(?:[^`<]*<([^`>]+)>|([^`]*))`$")
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<(https?://[^>\s]+)>")


def markup(text: str) -> Counter:
    """What a translation must keep verbatim: roles (glue, cite, ref, ...), inline code, math, link targets. A
    ``{glue:choice}`name|key=word|...``` (a chosen word in the translation's language) stands for the English
    ``{glue:text}`name```."""
    kept = Counter()
    for match in ROLE.finditer(text):
        role = re.sub(
            r"^\{glue:choice\}`([^|`]*)\|[^`]*`$", lambda m: "{glue:text}`" + m.group(1).strip() + "`", match.group(0)
        )
        kept["role " + LINK_ROLE.sub(lambda m: f"{m[1]}`{(m[2] or m[3]).strip()}`", role)] += 1
    rest = ROLE.sub(" ", text)
    for match in re.finditer(r"(`+)(.+?)\1", rest, re.S):
        kept["code " + match.group(2).strip()] += 1
    rest = re.sub(r"(`+)(.+?)\1", " ", rest, flags=re.S)
    for match in MATH.finditer(rest):
        kept["math " + re.sub(r"\s+", " ", match.group(0))] += 1
    for match in LINK.finditer(rest):
        kept["link " + (match.group(1) or match.group(2))] += 1
    return kept


def check_catalog(path: Path, release: bool) -> list[str]:
    """Problems of one .po file: markup that differs between msgid and msgstr; in release mode, every fuzzy or
    untranslated entry (the header, which gettext marks fuzzy, is not an entry)."""
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalog = read_po(f)  # the header is ``catalog``'s metadata; its "#, fuzzy" is catalog.fuzzy
    problems = []
    for message in catalog:
        if not message.id:
            continue
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{message.lineno}"
        string = message.string if isinstance(message.string, str) else "".join(message.string)
        short = message.id if len(message.id) < 70 else message.id[:67] + "..."
        if message.fuzzy:
            if release:
                problems.append(f"{where}: fuzzy (the English changed; retranslate, then remove the flag): {short}")
            continue
        if not string:
            if release:
                problems.append(f"{where}: untranslated: {short}")
            continue
        want, got = markup(message.id), markup(string)
        if want != got:
            missing = ", ".join(sorted((want - got).elements()))
            extra = ", ".join(sorted((got - want).elements()))
            problems.append(
                f"{where}: the translation changes the markup of {short!r}"
                + (f"; missing: {missing}" if missing else "")
                + (f"; added: {extra}" if extra else "")
            )
    return problems


def check(codes: list[str], release: bool, locales: Path = LOCALES) -> int:
    problems, files = [], 0
    for code in codes:
        for path in sorted((locales / code / "LC_MESSAGES").rglob("*.po")):
            files += 1
            problems += check_catalog(path, release)
    for line in problems:
        print(line)
    print(f"{files} catalogs checked ({'release' if release else 'draft'} mode): {len(problems)} problems")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["update", "build", "check"])
    parser.add_argument("--only", action="append", help="an edition's language code (repeatable)")
    parser.add_argument("--toc", type=Path, help="another table of contents (a smaller book, for checks)")
    parser.add_argument("--release", action="store_true", help="check: fail on any fuzzy or untranslated entry")
    args = parser.parse_args(argv)
    translated = [e["code"] for e in EDITIONS if e["code"] != "en"]
    if args.command == "update":
        return update(args.only or translated, args.toc)
    if args.command == "check":
        return check(args.only or translated, args.release)
    return build(args.only or [e["code"] for e in EDITIONS], args.toc)


if __name__ == "__main__":
    sys.exit(main())
