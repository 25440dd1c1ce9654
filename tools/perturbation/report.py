"""The report: one row per claim, one column per setting (✓ holds, ✗ fails, "not reached", "skipped"), the settings,
each run's time and verdict count, the notes, and the machine it ran on."""

from __future__ import annotations

import os
from pathlib import Path

from .settings import SETTINGS

MARK = {True: "✓", False: "✗", None: "not reached"}


def verdicts(results: dict) -> tuple[list[tuple], dict]:
    """Rows ``(notebook, key, sentence)`` in notebook order and ``{(notebook, key, setting): True|False|None}``."""
    rows, cells = [], {}
    for nb, per_setting in results.items():
        sentences = {}
        for setting, result in per_setting.items():
            for c in result.get("claims", []):
                key = (c["cell"] if c["cell"] is not None else -1, c["k"])
                # the default run's wording where it has one
                if key not in sentences or setting == "default":
                    sentences[key] = c["sentence"]
                cells[(nb, key, setting)] = c["holds"]
        rows += [(nb, key, sentences[key]) for key in sorted(sentences)]
    return rows, cells


def render(results: dict, order: list[str], notes: list[str], extra: dict) -> str:
    rows, cells = verdicts(results)
    head = ["notebook", "claim", *order]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for nb, key, sentence in rows:
        marks = []
        for s in order:
            result = results[nb].get(s)
            if result is None or result.get("status") == "skipped":
                marks.append("skipped")
            else:
                marks.append(MARK[cells.get((nb, key, s))])
        text = sentence.replace("|", "\\|").replace("\n", " ")
        out.append(f"| {Path(nb).stem} | {text} | " + " | ".join(marks) + " |")
    out += ["", "Settings:", ""]
    out += [f"- `{s}`: {SETTINGS[s].what}" for s in order]
    timing = [
        "",
        "Runs (wall seconds / kernel CPU seconds; claims holding of those reached):",
        "",
        "| notebook | " + " | ".join(order) + " |",
        "|" + "---|" * (len(order) + 1),
    ]
    for nb, per_setting in results.items():
        line = []
        for s in order:
            r = per_setting.get(s, {"status": "skipped"})
            if r["status"] == "skipped":
                line.append("skipped")
                continue
            held = sum(c["holds"] for c in r.get("claims", []))
            state = "" if r["status"] == "ok" else f" {r['status']}"
            line.append(
                f"{r['wall_s']:.0f} / {r.get('cpu_s', float('nan')):.0f} s, {held}/{len(r.get('claims', []))}{state}"
            )
        timing.append(f"| {Path(nb).stem} | " + " | ".join(line) + " |")
    out += timing
    if notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    out += [
        "",
        f"Run {extra['date']} on {extra['cpu']}; claims mode `BOOK_CLAIMS={extra['claims']}`; seed offset "
        f"{extra['seed_offset']}; timeout {extra['timeout']:.0f} s per notebook.",
    ]
    return "\n".join(out) + "\n"


def cpu_line(probe: dict) -> str:
    """The CPU's name, the cores this tool may use, and what torch reports."""
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        import platform

        name = platform.processor() or platform.machine()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    extra = f", torch {probe['torch']}, CPU capability {probe['capability']}" if probe else ""
    return f"{name or 'an unknown CPU'} ({cores} cores{extra})"
