"""Fix 6: provenance. At its foot, every notebook page says what produced its numbers: when the notebook was
executed (myst-nb's execution record; for a cached notebook, when it was cached), the commit built, the torch build,
the CPU capability torch reports (``torch.backends.cpu.get_cpu_capability()``), torch's thread count and the device,
taken in the build process, whose environment the kernels inherit. page_header.py puts the line on the page."""

from __future__ import annotations

import datetime
import html

from .facts import BUILD

PROVENANCE_CLASS = "book-provenance"

# the provenance line in each edition's language (tools/book_i18n.py builds the editions; English by default)
PROVENANCE_TEXT = {
    "en": {
        "line": "Numbers on this page: {when}, from {source}, with {facts}. Another machine, thread count or "
        "version computes somewhat different numbers.",
        "computed": "computed {stamp} UTC",
        "not_executed": "not executed in this build",
        "commit": "commit {ref}",
        "dirty": " with uncommitted changes",
        "outside_git": "a source tree outside git",
        "facts": "torch {torch}, CPU capability {capability}, {threads} threads, device {device}",
    },
    "zh": {
        "line": "本页的数字：{when}，来自{source}，使用 {facts}。换一台机器、线程数或版本，算出的数字会略有不同。",
        "computed": "计算于 {stamp} UTC",
        "not_executed": "本次构建中没有执行",
        "commit": "提交 {ref}",
        "dirty": "（含未提交的改动）",
        "outside_git": " git 之外的源代码树",
        "facts": "torch {torch}、CPU 能力 {capability}、{threads} 个线程、设备 {device}",
    },
}


def provenance_html(exec_data: dict | None, language: str | None = None) -> str:
    text = PROVENANCE_TEXT.get((language or "en").split("_")[0], PROVENANCE_TEXT["en"])
    commit, url = BUILD.get("commit"), BUILD.get("url")
    when = text["not_executed"]
    if exec_data and exec_data.get("mtime"):
        stamp = datetime.datetime.fromtimestamp(exec_data["mtime"], tz=datetime.timezone.utc)
        when = text["computed"].format(stamp=f"{stamp:%Y-%m-%d %H:%M}")
    if commit:
        short = html.escape(commit[:12])
        ref = (
            f'<a href="{html.escape(url.rstrip("/"))}/commit/{html.escape(commit)}"><code>{short}</code></a>'
            if url
            else f"<code>{short}</code>"
        )
        source = text["commit"].format(ref=ref) + (text["dirty"] if BUILD.get("dirty") else "")
    else:
        source = text["outside_git"]
    facts = text["facts"].format(
        torch=html.escape(str(BUILD.get("torch"))),
        capability=html.escape(str(BUILD.get("capability"))),
        threads=BUILD.get("threads"),
        device=html.escape(str(BUILD.get("device"))),
    )
    return (
        f'<p class="{PROVENANCE_CLASS}" style="font-size:85%;color:#555;margin:0.2em 0 1em 0">'
        + text["line"].format(when=when, source=source, facts=facts)
        + "</p>"
    )
