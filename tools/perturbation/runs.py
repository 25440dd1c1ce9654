"""The runs: each notebook under each setting in a worker process of its own (tools/perturb.py ``--worker``, with
the setting's environment, pinned to one core beside a busy process for ``core0-busy``), and the claims each run
logged, keyed by cell and place in the cell.

Verdicts come from ``transformer_lib.book_tools.claims``: with ``BOOK_CLAIMS_LOG=<file>`` set, every ``claim()``
appends a JSON line ``{"sentence", "holds"}``; before each cell, the worker appends ``{"cell": index}``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from .seed_offset import write_ipython_dir
from .settings import Setting, base_env, first_core

TOOL = Path(__file__).resolve().parent.parent / "perturb.py"  # the worker is the tool itself, with --worker
SPINNER = "while True: pass"


def run_one(notebook: Path, setting: Setting, run_dir: Path, args) -> dict:
    """Run ``notebook`` under ``setting`` in a worker process; return its result with the claims it logged."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "claims.jsonl"
    log.write_text("", encoding="utf-8")
    env = base_env()
    env.update(setting.env)
    env["BOOK_CLAIMS_LOG"] = str(log)
    env["BOOK_CLAIMS"] = args.claims
    if not setting.cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if setting.seed_offset:
        env["IPYTHONDIR"] = str(write_ipython_dir(run_dir / "ipython", args.seed_offset, args.seed_keep))
    core = first_core() if setting.pinned else None
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    spinner = None
    if setting.pinned:
        spinner = subprocess.Popen(
            [sys.executable, "-c", SPINNER],
            preexec_fn=pin,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    cmd = [sys.executable, str(TOOL), "--worker", str(notebook.resolve()), str(run_dir), str(args.timeout)]
    start = time.perf_counter()
    with open(run_dir / "worker.log", "w") as worker_log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=run_dir,
            preexec_fn=pin,
            start_new_session=True,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
    try:
        proc.wait(timeout=args.timeout)
        result_file = run_dir / "result.json"
        result = (
            json.loads(result_file.read_text())
            if result_file.exists()
            else {
                "status": "error",
                "cell": None,
                "error": f"the worker exited with status {proc.returncode}: see {run_dir / 'worker.log'}",
            }
        )
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session: it and its kernel
        proc.wait()
        result = {"status": "timeout", "cell": last_cell(log), "error": f"the notebook ran over {args.timeout:.0f} s"}
    except BaseException:  # interrupted: leave no worker or kernel behind
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    result.setdefault("wall_s", time.perf_counter() - start)
    result["claims"] = read_claims(log)
    return result


def last_cell(log: Path) -> int | None:
    """The cell that was running when the log ended (its last cell marker)."""
    cells = [
        e["cell"]
        for e in map(json.loads, filter(str.strip, log.read_text(encoding="utf-8").splitlines()))
        if "cell" in e and "sentence" not in e
    ]
    return cells[-1] if cells else None


def read_claims(log: Path) -> list[dict]:
    """The claims of a log, each with its key ``(cell, k)``: the k-th claim logged during cell ``cell``."""
    claims, cell, k = [], None, 0
    if not log.exists():
        return claims
    for line in log.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "cell" in entry and "sentence" not in entry:
            cell, k = entry["cell"], 0
        elif "sentence" in entry:
            claims.append({"cell": cell, "k": k, "sentence": entry["sentence"], "holds": bool(entry.get("holds"))})
            k += 1
    return claims


def claim_calls_in_source(notebook: Path) -> int:
    """How many ``claim(``/``claim_verdict(`` calls the notebook's code cells contain (a cross-check)."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    pattern = re.compile(r"(?<![\w.])claim(?:_verdict)?\(|\btl\.claim(?:_verdict)?\(")
    total = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            source = "".join(cell.get("source", ""))
            total += sum(
                1
                for line in source.splitlines()
                if not line.lstrip().startswith(("def ", "#", "from ", "import "))
                for _ in pattern.finditer(line)
            )
    return total
