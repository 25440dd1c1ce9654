"""Run chapters under settings that change their arithmetic or their speed, and tabulate every claim's verdict.

    .venv/bin/python tools/perturb.py [NOTEBOOK ...] [--settings default,seed-offset,...] [--timeout S]
    make perturb NOTEBOOKS="notebooks/encoder_decoder.ipynb notebooks/quantization.ipynb"

A claim that the book makes has to hold on the readers' machines, not only on the one it was written on. Each
setting below draws another sample of what a reader's machine does (other kernels, another reduction order,
other random draws, fewer and busier cores); a claim that flips under one of them is a claim that some reader
will see fail. Every notebook runs once per setting, one run after another (never in parallel: the timings in
the chapters would measure each other), with nbclient, in a temporary folder of this tool.

Settings (``--settings``, comma-separated; default: all):

* ``default``: the caller's environment, on the CPU.
* ``aten-default``: ``ATEN_CPU_CAPABILITY=default``: torch's own kernels (softmax, LayerNorm, ``randn``) without
  AVX2/AVX-512, as on an older or another CPU; MKL's matrix products are unchanged.
* ``mkl-compatible``: ``MKL_CBWR=COMPATIBLE``: MKL's matrix products in its conservative code path.
* ``avx2``: ``ATEN_CPU_CAPABILITY=avx2`` and ``MKL_ENABLE_INSTRUCTIONS=AVX2``: on an AVX-512 CPU, the arithmetic of an
  AVX2-only one (torch's kernels and MKL's); on an AVX2 CPU the same as ``default``. x86 only.
* ``one-thread``: ``OMP_NUM_THREADS=1`` and ``MKL_NUM_THREADS=1``: another reduction order, and a slower machine.
* ``seed-offset``: every seed the chapter sets is offset by ``--seed-offset`` (default 1000): the same experiment,
  other samples. No notebook is edited: an IPython start-up file (a temporary ``IPYTHONDIR``) wraps, in the
  kernel, before any cell runs: ``torch.manual_seed`` (also as ``torch.random.manual_seed``), ``torch.Generator``'s
  ``manual_seed`` (``torch.Generator`` is replaced by a subclass, so ``torch.Generator(device=...).manual_seed(s)``
  in the library is offset too), ``random.seed`` and ``random.Random`` (its ``seed``, which ``random.Random(s)``
  calls), ``numpy.random.seed``, ``numpy.random.default_rng`` and ``numpy.random.RandomState``. Through these, the
  library's ``seed=`` arguments are offset as well: ``seed_everything``, ``generate(seed=)``, ``TrainConfig.seed``,
  the experiments' seeds, ``date_pairs``, ``random_importance``, ``sentence_sets``. Only integer seeds are offset
  (``None``, strings, bytes, ``SeedSequence`` and arrays pass unchanged); a call made inside another wrapped call
  (``Random.__init__`` calling ``seed``) is offset once. ``torch.cuda.manual_seed*`` is not wrapped: it is reached
  through ``torch.manual_seed`` with the offset seed. Not offset: the calls made from within the functions named
  in ``--seed-keep`` (default: ``transformer_lib.data.dates:date_split``, the train/test split of days the committed
  translator was trained on: offsetting it would put training days into the test set;
  ``transformer_lib.book_models.metrics:shakespeare_val_batches``, the held-out windows that the GPT checkpoint's
  record and chapter 09's committed study were scored on; ``transformer_lib.experiments.minilm_pruning:sentence_sets``
  and ``:sensitivity_importance``, the sentence sets and gradient probes of chapter 08's committed study, which the
  page recomputes with the file's seeds to check the file and pairs with its own measurements set by set;
  ``transformer_lib.data.task_data:play_line_task``, chapter 12's split of lines the committed adapters were trained on;
  ``transformer_lib.experiments.moe_vs_dense:val_batches``, the held-out windows chapter 11's record scored its
  committed mixtures on), and anything random that was fixed when a checkpoint was trained (the committed weights
  are loaded, not retrained).
* ``core0-busy``: the notebook's process and a competing CPU-bound process (``python -c "while True: pass"``)
  both pinned to the first core this tool may use, as ``taskset -c 0`` does: a machine half as fast, and busy.
  Linux only (skipped with a note where ``os.sched_setaffinity`` is missing).
* ``cuda``: the GPU visible (the other settings hide it with ``CUDA_VISIBLE_DEVICES=""``, so that they run on the
  CPU everywhere); skipped with a note when ``torch.cuda.is_available()`` is false.

Verdicts come from ``transformer_lib.book_tools.claims``: with ``BOOK_CLAIMS_LOG=<file>`` set, every ``claim()``
appends a JSON
line ``{"sentence", "holds"}``. Before each cell, this tool appends ``{"cell": index}`` to the same file, so a claim
is known by its notebook, its cell and its place in that cell (a sentence that quotes a measurement, as
``claim_verdict``'s do, is still the same claim in every setting). The runs set ``BOOK_CLAIMS=report`` (``--claims``),
so that where report mode exists a notebook runs on past a failed claim; where a failed claim stops the notebook,
the claims after it are marked "not reached": the claims are those seen in any setting's run of the notebook.

Output: a Markdown table (one row per claim, one column per setting: ✓ holds, ✗ fails, "not reached", "skipped"),
the notes (a notebook that stopped, and why; a skipped setting) and each run's time (wall and kernel CPU seconds),
printed and written to ``--output`` (default ``_build/perturb.md``; its data also as JSON beside it). Exit status:
0 when every claim reached holds and every run finished, 1 otherwise (a claim that fails, a notebook that stops on
an error or runs past ``--timeout``).

The parts, in tools/perturbation/: the settings (settings.py), the seed offset installed in the kernel
(seed_offset.py), one run in a worker process (worker.py), the runs and their claim logs (runs.py), the table
(report.py). This file is the command line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

# python tools/perturb.py puts tools/ first on sys.path; a test that loads this file by path does not
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

from perturbation.report import MARK, cpu_line, render, verdicts  # noqa: E402
from perturbation.runs import SPINNER, claim_calls_in_source, last_cell, read_claims, run_one  # noqa: E402
from perturbation.seed_offset import (  # noqa: E402
    DEFAULT_KEEP,
    DEFAULT_OFFSET,
    STARTUP,
    install_seed_offset,
    write_ipython_dir,
)
from perturbation.settings import CONTROLLED, SETTINGS, Setting, base_env, first_core, probe_torch  # noqa: E402
from perturbation.worker import worker  # noqa: E402

__all__ = [  # the parts' names, reachable from the command (the tests load this file)
    "CONTROLLED",
    "DEFAULT_KEEP",
    "DEFAULT_OFFSET",
    "MARK",
    "SETTINGS",
    "SPINNER",
    "STARTUP",
    "Setting",
    "base_env",
    "claim_calls_in_source",
    "cpu_line",
    "first_core",
    "install_seed_offset",
    "last_cell",
    "main",
    "parse",
    "probe_torch",
    "read_claims",
    "render",
    "run_one",
    "verdicts",
    "worker",
    "write_ipython_dir",
]

ROOT = Path(__file__).resolve().parent.parent


def parse(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Settings: " + ", ".join(SETTINGS),
    )
    p.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    p.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help="comma-separated, from: " + ", ".join(SETTINGS) + " (default: all)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds per notebook run, kernel start included (default 1800: a busy machine)",
    )
    p.add_argument("--seed-offset", type=int, default=DEFAULT_OFFSET, help=f"default {DEFAULT_OFFSET}")
    p.add_argument(
        "--seed-keep",
        default=",".join(DEFAULT_KEEP),
        help="module:function whose seeds are not offset, comma-separated (default: %(default)s)",
    )
    p.add_argument(
        "--claims",
        choices=("report", "strict"),
        default="report",
        help="BOOK_CLAIMS for the runs (default report: run on past a failed claim where supported)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=ROOT / "_build" / "perturb.md",
        help="the Markdown table (default _build/perturb.md; JSON beside it)",
    )
    p.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the executed notebooks and logs in this folder (default: a temporary one, removed)",
    )
    args = p.parse_args(argv)
    args.seed_keep = tuple(k for k in args.seed_keep.split(",") if k)
    for k in args.seed_keep:
        if ":" not in k:
            p.error(f"--seed-keep takes module:function entries, got {k!r}")
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [s for s in names if s not in SETTINGS]
    if unknown or not names:
        p.error(f"--settings: unknown {unknown or names}; choose from {', '.join(SETTINGS)}")
    args.settings = names
    if not args.notebooks:
        args.notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    missing = [str(n) for n in args.notebooks if not n.is_file()]
    if missing:
        p.error(f"no such notebook: {', '.join(missing)}")
    if args.timeout <= 0:
        p.error(f"--timeout must be positive, got {args.timeout}")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(argv[1], argv[2], float(argv[3]))
    args = parse(argv)
    notes, skipped = [], {}
    probe = probe_torch(base_env())
    if "cuda" in args.settings and not probe.get("cuda"):
        skipped["cuda"] = "`cuda` skipped: torch.cuda.is_available() is false here"
    if "core0-busy" in args.settings and first_core() is None:
        skipped["core0-busy"] = "`core0-busy` skipped: no os.sched_setaffinity on this system"
    notes += list(skipped.values())
    work = Path(tempfile.mkdtemp(prefix="perturb-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    runs = [(nb, s) for nb in args.notebooks for s in args.settings]
    failed_runs = False
    try:
        for i, (nb, s) in enumerate(runs, 1):
            per = results.setdefault(str(nb), {})
            if s in skipped:
                per[s] = {"status": "skipped", "claims": []}
                print(f"[{i}/{len(runs)}] {nb.stem} under {s}: skipped", flush=True)
                continue
            r = per[s] = run_one(nb, SETTINGS[s], work / nb.stem / s, args)
            held = sum(c["holds"] for c in r["claims"])
            print(
                f"[{i}/{len(runs)}] {nb.stem} under {s}: {held} of {len(r['claims'])} claims hold, "
                f"{r['status']} ({r['wall_s']:.0f} s wall, {r.get('cpu_s', float('nan')):.0f} s kernel CPU)",
                flush=True,
            )
            if r["status"] != "ok":
                failed_runs = failed_runs or r["status"] != "failed claim"
                where = f" at cell {r['cell']}" if r.get("cell") is not None else ""
                error = " ".join(r.get("error", "").split("Here is a preview")[0].split())  # one line
                notes.append(f"{nb.stem} under `{s}` stopped{where}: {r['status']}: {error}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    for nb in args.notebooks:
        per = results.get(str(nb), {})
        seen = {(c["cell"], c["k"]) for r in per.values() for c in r.get("claims", [])}
        in_source = claim_calls_in_source(nb)
        if len(seen) < in_source:
            notes.append(
                f"{nb.stem}: {in_source} claim calls in its source, {len(seen)} seen in these runs "
                "(claims never reached in any run are not in the table)"
            )
    extra = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_line(probe),
        "claims": args.claims,
        "seed_offset": args.seed_offset,
        "timeout": args.timeout,
    }
    table = render(results, args.settings, notes, extra)
    print()
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(table, encoding="utf-8")
    args.output.with_suffix(".json").write_text(json.dumps({"results": results, **extra}, indent=1), encoding="utf-8")
    print(f"written to {args.output}")
    rows, cells = verdicts(results)
    any_false = any(v is False for v in cells.values())
    any_unreached = any(
        cells.get((nb, key, s)) is None
        for nb, key, _ in rows
        for s in args.settings
        if results[nb].get(s, {}).get("status") not in (None, "skipped")
    )
    return 1 if (any_false or failed_runs or any_unreached) else 0


if __name__ == "__main__":
    sys.exit(main())
