"""One run, in a worker process (tools/perturb.py with ``--worker``): execute one notebook with nbclient, marking in
the claims log which cell runs, and write the result (status, failed cell, wall and kernel CPU seconds) and the
executed notebook into the run's folder."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _patch_nbclient_stall() -> None:
    """The book's bound on a rare end-of-cell stall of nbclient (tools/book_build/nbclient_stall.py), here too."""
    try:
        from book_build import nbclient_stall  # tools/, on sys.path: the worker runs tools/perturb.py

        nbclient_stall.install()
    except Exception:  # noqa: BLE001 (without it the run is only slower in a rare case)
        pass


def worker(notebook: str, run_dir: str, timeout: float) -> int:
    """Execute ``notebook`` with cwd ``run_dir``; write ``result.json`` and the executed notebook there."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    import resource

    _patch_nbclient_stall()
    run = Path(run_dir)
    log = os.environ["BOOK_CLAIMS_LOG"]
    nb = nbformat.read(notebook, as_version=4)
    current = {"cell": None}

    def mark(cell, cell_index, **_):
        current["cell"] = cell_index
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"cell": cell_index}) + "\n")

    client = NotebookClient(
        nb,
        timeout=int(timeout),
        startup_timeout=300,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(run)}},
        on_cell_execute=mark,
    )
    result = {"status": "ok"}
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as e:
        failed_claim = e.ename == "AssertionError" and str(e.evalue).startswith("claim no longer holds")
        result = {
            "status": "failed claim" if failed_claim else "error",
            "cell": current["cell"],
            "error": f"{e.ename}: {e.evalue}"[:300],
        }
    except (CellTimeoutError, TimeoutError) as e:
        result = {"status": "timeout", "cell": current["cell"], "error": str(e)[:300]}
    except DeadKernelError as e:
        result = {"status": "error", "cell": current["cell"], "error": f"the kernel died: {e}"[:300]}
    result["wall_s"] = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu_s"] = children.ru_utime + children.ru_stime
    nbformat.write(nb, str(run / Path(notebook).name))
    (run / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return 0
