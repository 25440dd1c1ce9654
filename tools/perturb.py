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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()

# variables the settings control: removed from the caller's environment first, so "default" is the default
CONTROLLED = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BOOK_CLAIMS",
    "BOOK_CLAIMS_LOG",
    "IPYTHONDIR",
)
# seeds fixed by a committed file, not samples to redraw: the days the committed translator was trained on; the
# held-out windows of the Shakespeare GPT, which its checkpoint's record and chapter 09's committed study were scored
# on (the page checks its perplexity on them against the file's); and the sentence sets and gradient probes of
# chapter 08's committed MiniLM study (the page recomputes part of it with the same seeds to check that the file
# belongs to the model, and pairs its own measurements with the file's, set by set); chapter 12's split of lines
# that the committed adapters were trained on; chapter 11's held-out windows, which its record scored the committed
# mixtures on (the page checks the loaded models against the record on them)
DEFAULT_KEEP = (
    "transformer_lib.data.dates:date_split",
    "transformer_lib.book_models.metrics:shakespeare_val_batches",
    "transformer_lib.experiments.minilm_pruning:sentence_sets",
    "transformer_lib.experiments.minilm_pruning:sensitivity_importance",
    "transformer_lib.data.task_data:play_line_task",
    "transformer_lib.experiments.moe_vs_dense:val_batches",
)
DEFAULT_OFFSET = 1000
SPINNER = "while True: pass"


@dataclass(frozen=True)
class Setting:
    name: str
    what: str
    env: dict = field(default_factory=dict)
    seed_offset: bool = False
    pinned: bool = False
    cuda: bool = False


SETTINGS = {
    s.name: s
    for s in (
        Setting("default", "the caller's environment, CPU"),
        Setting(
            "aten-default",
            "`ATEN_CPU_CAPABILITY=default`: torch's kernels without AVX2/AVX-512",
            env={"ATEN_CPU_CAPABILITY": "default"},
        ),
        Setting(
            "mkl-compatible",
            "`MKL_CBWR=COMPATIBLE`: MKL's conservative matrix products",
            env={"MKL_CBWR": "COMPATIBLE"},
        ),
        Setting(
            "avx2",
            "`ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`: an AVX2-only CPU's code paths",
            env={"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
        ),
        Setting(
            "one-thread", "`OMP_NUM_THREADS=1 MKL_NUM_THREADS=1`", env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        ),
        Setting("seed-offset", "every integer seed offset (torch, torch.Generator, random, numpy)", seed_offset=True),
        Setting("core0-busy", "the run and a competing busy process pinned to one core (`taskset -c 0`)", pinned=True),
        Setting("cuda", "the GPU visible (CUDA)", cuda=True),
    )
}


# ---------------------------------------------------------------------------------------------------------------
# The seed offset, installed in the kernel by an IPython start-up file (see the module docstring).


def install_seed_offset(offset: int, keep=DEFAULT_KEEP) -> None:
    """Wrap the seeding functions of torch, ``random`` and numpy so that every integer seed becomes
    ``seed + offset``, except in calls made from within a function named in ``keep`` (``"module:function"``)."""
    import functools
    import random
    import threading

    keep = {tuple(k.split(":", 1)) for k in keep}
    inside = threading.local()

    def kept() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if (frame.f_globals.get("__name__"), frame.f_code.co_name) in keep:
                return True
            frame = frame.f_back
        return False

    def shifted(seed):
        import numbers

        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            return seed
        return int(seed) + offset

    def wrap(fn, position: int, keyword: str):
        """``fn`` whose seed argument (``position`` among the positional ones, or ``keyword``) is offset."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if getattr(inside, "on", False) or kept():
                return fn(*args, **kwargs)
            if len(args) > position:
                args = (*args[:position], shifted(args[position]), *args[position + 1 :])
            elif keyword in kwargs:
                kwargs[keyword] = shifted(kwargs[keyword])
            inside.on = True
            try:
                return fn(*args, **kwargs)
            finally:
                inside.on = False

        wrapper.__perturb_wrapped__ = True
        return wrapper

    def subclass(native, **methods):
        """``native`` with ``methods`` replaced; ``isinstance`` and ``issubclass`` answer as for ``native``, so
        the instances made before (``torch.default_generator``, numpy's global ``RandomState``) still pass."""

        class Meta(type(native)):
            def __instancecheck__(cls, obj):
                return isinstance(obj, native)

            def __subclasscheck__(cls, sub):
                return issubclass(sub, native)

        return Meta(
            native.__name__,
            (native,),
            {**methods, "__module__": native.__module__, "__qualname__": native.__qualname__},
        )

    random.Random.seed = wrap(random.Random.seed, 1, "a")  # random.Random(s) calls it from __init__
    random.seed = random._inst.seed  # the module's function is a method bound to its hidden instance

    import numpy as np

    np.random.seed = wrap(np.random.seed, 0, "seed")
    np.random.default_rng = wrap(np.random.default_rng, 0, "seed")
    legacy = np.random.RandomState
    np.random.RandomState = subclass(
        legacy, __init__=wrap(legacy.__init__, 1, "seed"), seed=wrap(legacy.seed, 1, "seed")
    )

    import torch

    torch.manual_seed = torch.random.manual_seed = wrap(torch.random.manual_seed, 0, "seed")
    native = torch.Generator
    torch.Generator = subclass(native, manual_seed=wrap(native.manual_seed, 1, "seed"))


STARTUP = """\
def _perturb_seed_offset():
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("_perturb_tool", {path!r})
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.install_seed_offset({offset!r}, {keep!r})
_perturb_seed_offset()
del _perturb_seed_offset
"""


def write_ipython_dir(folder: Path, offset: int, keep) -> Path:
    """An ``IPYTHONDIR`` whose default profile installs the seed offset at kernel start."""
    startup = folder / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-perturb-seed-offset.py").write_text(
        STARTUP.format(path=str(HERE), offset=int(offset), keep=tuple(keep)), encoding="utf-8"
    )
    return folder


# ---------------------------------------------------------------------------------------------------------------
# One run: a worker process (this file with --worker) executes one notebook with nbclient.


def _patch_nbclient_stall() -> None:
    """The book's bound on a rare end-of-cell stall of nbclient (tools/book_fixes.py), applied here too."""
    try:
        import importlib.util

        spec = importlib.util.spec_from_file_location("_book_fixes", HERE.with_name("book_fixes.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from jupyter_client.channels import AsyncZMQSocketChannel

        AsyncZMQSocketChannel.get_msg = module.get_msg
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


def probe_torch(env: dict) -> dict:
    """torch's version, CPU capability and whether it sees a GPU, in ``env`` (asked in a subprocess, once)."""
    code = (
        "import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.cuda.is_available(), "
        "'capability': torch.backends.cpu.get_cpu_capability()}))"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {}


def first_core() -> int | None:
    """The first core this process may run on (``taskset -c 0`` where all are allowed); None off Linux."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    return min(os.sched_getaffinity(0))


def base_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CONTROLLED}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


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
    cmd = [sys.executable, str(HERE), "--worker", str(notebook.resolve()), str(run_dir), str(args.timeout)]
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


# ---------------------------------------------------------------------------------------------------------------
# The table.

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
