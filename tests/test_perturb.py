"""tools/perturb.py: tiny notebooks written into tmp_path, run under some of the tool's settings.

Most notebooks here use a stand-in ``claim`` with the library's log protocol (one JSON line per verdict in
``BOOK_CLAIMS_LOG``; raise unless ``BOOK_CLAIMS=report``), so their kernels start without importing torch;
``test_library_log_protocol`` ties that protocol to ``transformer_lib.book_tools.claims``, and the seed-offset notebook
uses
the library itself.
"""

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent


def load_tool():
    spec = importlib.util.spec_from_file_location("perturb_tool", ROOT / "tools" / "perturb.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


perturb = load_tool()

STUB = textwrap.dedent("""\
    import json, os
    def claim(condition, sentence):
        with open(os.environ["BOOK_CLAIMS_LOG"], "a") as f:
            f.write(json.dumps({"sentence": sentence, "holds": bool(condition)}) + "\\n")
        if not condition and os.environ.get("BOOK_CLAIMS") != "report":
            raise AssertionError("claim no longer holds: " + sentence)
    """)


def write_nb(path: Path, *cells: str) -> Path:
    nb = new_notebook(cells=[new_markdown_cell("# A test notebook")] + [new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def run(tmp_path, notebooks, settings, *extra, probe=None, monkeypatch=None):
    """``perturb.main`` on ``notebooks``; returns (exit status, table text, JSON data)."""
    if monkeypatch is not None:  # no torch probe (a torch import) where the test does not need it
        monkeypatch.setattr(perturb, "probe_torch", lambda env: probe or {})
    out = tmp_path / "out" / "table.md"
    rc = perturb.main([*map(str, notebooks), "--settings", settings, "--output", str(out), "--timeout", "120", *extra])
    return rc, out.read_text(), json.loads(out.with_suffix(".json").read_text())


def rows(table: str) -> dict:
    """``{claim sentence: [mark per setting]}`` from the tool's first table."""
    out = {}
    for line in table.split("\n\n")[0].splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[cells[1]] = cells[2:]
    return out


def test_library_log_protocol(tmp_path, monkeypatch):
    """The real ``claim`` writes what the tool reads; the tool's cell markers key each claim by cell and place."""
    from transformer_lib.book_tools.claims import claim

    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("BOOK_CLAIMS_LOG", str(log))
    monkeypatch.setenv("BOOK_CLAIMS", "strict")
    with open(log, "a") as f:
        f.write(json.dumps({"cell": 3}) + "\n")
    claim(True, "first")
    with contextlib.suppress(AssertionError):
        claim(False, "second")
    with open(log, "a") as f:
        f.write(json.dumps({"cell": 5}) + "\n")
    claim(1 < 2, "third")
    assert perturb.read_claims(log) == [
        {"cell": 3, "k": 0, "sentence": "first", "holds": True},
        {"cell": 3, "k": 1, "sentence": "second", "holds": False},
        {"cell": 5, "k": 0, "sentence": "third", "holds": True},
    ]


def test_failure_under_one_thread_and_not_reached(tmp_path, monkeypatch):
    """Strict: the failing claim stops the notebook under one thread, the next claim is "not reached" there; the
    default run supplies its sentence. Exit status 1."""
    nb = write_nb(
        tmp_path / "threads.ipynb",
        STUB,
        "claim(os.environ.get('OMP_NUM_THREADS') != '1', 'needs more than one thread')",
        "claim(True, 'comes after it')\nclaim(True, 'and another')",
    )
    rc, table, data = run(tmp_path, [nb], "default,one-thread", "--claims", "strict", monkeypatch=monkeypatch)
    assert rc == 1
    assert rows(table) == {
        "needs more than one thread": ["✓", "✗"],
        "comes after it": ["✓", "not reached"],
        "and another": ["✓", "not reached"],
    }
    result = data["results"][str(nb)]["one-thread"]
    assert result["status"] == "failed claim" and result["cell"] == 2  # cell 0 is the markdown title
    assert "threads under `one-thread` stopped at cell 2" in table


def test_report_mode_gives_every_verdict(tmp_path, monkeypatch):
    """With BOOK_CLAIMS=report (the tool's default) a notebook that runs on past a failure gets every verdict."""
    nb = write_nb(
        tmp_path / "threads.ipynb",
        STUB,
        "claim(os.environ.get('OMP_NUM_THREADS') != '1', 'needs more than one thread')",
        "claim(os.environ['BOOK_CLAIMS'] == 'report', 'report mode is asked for')",
    )
    rc, table, _ = run(tmp_path, [nb], "one-thread", monkeypatch=monkeypatch)
    assert rc == 1
    assert rows(table) == {"needs more than one thread": ["✗"], "report mode is asked for": ["✓"]}


def test_error_timeout_and_source_count(tmp_path, monkeypatch):
    """Another exception and a run past the timeout are reported with their cell; the source's claim calls that no
    run reached are counted in a note."""
    broken = write_nb(
        tmp_path / "broken.ipynb",
        STUB,
        "claim(True, 'before the error')",
        "1 / 0",
        "claim(True, 'never reached anywhere')",
    )
    rc, table, data = run(tmp_path, [broken], "default", monkeypatch=monkeypatch)
    assert rc == 1
    assert rows(table) == {"before the error": ["✓"]}
    assert data["results"][str(broken)]["default"]["status"] == "error"
    assert "broken under `default` stopped at cell 3: error: ZeroDivisionError" in table
    assert "broken: 2 claim calls in its source, 1 seen" in table
    slow = write_nb(tmp_path / "slow.ipynb", STUB, "import time\ntime.sleep(600)")
    start = time.perf_counter()
    rc, table, data = run(tmp_path, [slow], "default", "--timeout", "5", monkeypatch=monkeypatch)
    assert rc == 1 and time.perf_counter() - start < 60
    assert data["results"][str(slow)]["default"]["status"] == "timeout"
    assert "slow under `default` stopped" in table and "timeout" in table


def test_all_hold_exit_zero_and_cuda(tmp_path, monkeypatch):
    """Every claim holds: exit status 0. The real probe decides the cuda column: without a GPU "skipped", with a
    note, and no failure; with one, the notebook runs there too."""
    probe = perturb.probe_torch(perturb.base_env())
    assert probe["torch"].startswith("2.") and probe["capability"]
    nb = write_nb(tmp_path / "always.ipynb", STUB, "claim(2 + 2 == 4, 'two and two make four')")
    rc, table, data = run(tmp_path, [nb], "default,cuda", probe=probe, monkeypatch=monkeypatch)
    assert rc == 0
    assert data["results"][str(nb)]["default"]["status"] == "ok"
    assert f"CPU capability {probe['capability']}" in table
    if probe["cuda"]:
        assert rows(table) == {"two and two make four": ["✓", "✓"]}
    else:
        assert rows(table) == {"two and two make four": ["✓", "skipped"]}
        assert "`cuda` skipped: torch.cuda.is_available() is false here" in table


@pytest.mark.slow
@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and at least two cores",
)
def test_core0_busy_pins_and_competes(tmp_path, monkeypatch):
    """Under core0-busy the kernel may use one core, and a busy loop there gets about half of it."""
    nb = write_nb(
        tmp_path / "cores.ipynb",
        STUB,
        "import time\n"
        "claim(len(os.sched_getaffinity(0)) == 1, 'runs on one core')\n"
        "wall, cpu = time.perf_counter(), time.process_time()\n"
        "while time.perf_counter() - wall < 1.0: pass\n"
        "share = (time.process_time() - cpu) / (time.perf_counter() - wall)\n"
        "claim(share < 0.8, 'shares its core with another busy process')",
    )
    rc, table, _ = run(tmp_path, [nb], "default,core0-busy", "--claims", "report", monkeypatch=monkeypatch)
    marks = rows(table)
    assert marks["runs on one core"] == ["✗", "✓"]
    assert marks["shares its core with another busy process"][1] == "✓"


SEEDS_NB = (
    "import json, os, random\nimport numpy as np, torch\nimport transformer_lib as tl\n"
    "from transformer_lib.book_tools.claims import claim\n"
    "from transformer_lib.data.dates import date_pairs, date_split\nseen = {}",
    "torch.manual_seed(3); seen['torch'] = torch.initial_seed()\n"
    "seen['generator'] = torch.Generator().manual_seed(4).initial_seed()\n"
    "seen['random'] = random.Random(5).random(); random.seed(5); seen['random.seed'] = random.random()\n"
    "seen['numpy'] = np.random.default_rng(6).random(); np.random.seed(6); seen['np.random.seed'] = np.random.rand()\n"
    "seen['seed_everything'] = [tl.seed_everything(7).initial_seed(), torch.initial_seed()]\n"
    "seen['date_pairs'] = date_pairs(date_split()[0], 3, seed=8)\n"
    "seen['test_days'] = [str(d) for d in date_split()[1][:5]]\n"
    "json.dump(seen, open('seen.json', 'w'))",
    "claim(torch.initial_seed() == 7, 'torch is seeded as the chapter says')",
)


@pytest.mark.slow
def test_seed_offset_reaches_torch_numpy_random_and_the_library(tmp_path, monkeypatch):
    """In the kernel, with the library's own claim: every seed moves by the offset except date_split's."""
    import random

    import numpy as np

    from transformer_lib.data.dates import date_pairs, date_split

    nb = write_nb(tmp_path / "seeds.ipynb", *SEEDS_NB)
    keep = tmp_path / "runs"
    rc, table, _ = run(
        tmp_path, [nb], "default,seed-offset", "--seed-offset", "100", "--keep", str(keep), monkeypatch=monkeypatch
    )
    assert rc == 1
    assert rows(table) == {"torch is seeded as the chapter says": ["✓", "✗"]}
    seen = {s: json.loads((keep / "seeds" / s / "seen.json").read_text()) for s in ("default", "seed-offset")}
    for setting, offset in (("default", 0), ("seed-offset", 100)):
        got = seen[setting]
        rng = np.random.RandomState(6 + offset)
        assert got["torch"] == 3 + offset and got["generator"] == 4 + offset
        assert got["random"] == got["random.seed"] == random.Random(5 + offset).random()
        assert got["numpy"] == np.random.default_rng(6 + offset).random()
        assert got["np.random.seed"] == rng.rand()
        assert got["seed_everything"] == [7 + offset, 7 + offset]
        assert got["date_pairs"] == [list(p) for p in date_pairs(date_split()[0], 3, seed=8 + offset)]
        assert got["test_days"] == [str(d) for d in date_split()[1][:5]]  # kept: the checkpoint's split


def test_seed_offset_wrappers(tmp_path):
    """The wrappers in a fresh interpreter: integer seeds (positional, keyword, numpy integers) move, None does not,
    a nested call moves once, and the functions named in keep see their own seeds."""
    code = textwrap.dedent(f"""
        import importlib.util, random, sys
        spec = importlib.util.spec_from_file_location("p", {str(ROOT / "tools" / "perturb.py")!r})
        p = importlib.util.module_from_spec(spec); sys.modules["p"] = p; spec.loader.exec_module(p)
        import numpy as np, torch
        ref = [torch.randn(2, generator=torch.Generator().manual_seed(1005)).tolist(), random.Random(1005).random(),
               np.random.default_rng(1005).random(), np.random.RandomState(1005).rand()]
        def split(): return random.Random(5).random()
        p.install_seed_offset(1000, keep=("__main__:split",))
        got = [torch.randn(2, generator=torch.Generator(device="cpu").manual_seed(5)).tolist(),
               random.Random(5).random(), np.random.default_rng(seed=np.int64(5)).random(),
               np.random.RandomState(5).rand()]
        assert got == ref, (got, ref)
        assert torch.manual_seed(seed=5).initial_seed() == 1005 and torch.random.manual_seed(5).initial_seed() == 1005
        assert isinstance(torch.Generator(), torch._C.Generator)
        assert isinstance(torch.default_generator, torch.Generator)  # made before: isinstance still holds
        assert isinstance(np.random.mtrand._rand, np.random.RandomState)
        assert split() == random.Random(5 - 1000).random()
        torch.Generator().seed(); random.seed(None); np.random.default_rng(None); random.Random("text")
        print("ok")
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr


def test_arguments_are_checked(tmp_path):
    nb = write_nb(tmp_path / "a.ipynb", "1")
    for bad in (
        ["--settings", "default,fast"],
        ["--timeout", "0"],
        [str(tmp_path / "missing.ipynb")],
        ["--seed-keep", "date_split"],
    ):
        with pytest.raises(SystemExit) as e:
            perturb.parse([str(nb), *bad] if bad[0].startswith("--") else bad)
        assert e.value.code == 2
    assert perturb.parse([str(nb)]).settings == list(perturb.SETTINGS)
    assert perturb.parse([]).notebooks == sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_default_seed_keep_names_real_functions_and_keeps_their_seeds():
    """Each ``--seed-keep`` default is a function of its module (a renamed one would silently be offset again), and
    chapter 08's committed study's sentence sets come back unchanged under the offset, while a bare draw moves."""
    import importlib
    import inspect

    for entry in perturb.DEFAULT_KEEP:
        module, name = entry.split(":")
        fn = inspect.unwrap(getattr(importlib.import_module(module), name))  # date_split is cached
        assert fn.__code__.co_name == name and fn.__module__ == module, entry
    code = textwrap.dedent(f"""\
        import importlib.util, random, sys
        spec = importlib.util.spec_from_file_location("t", {str(ROOT / "tools" / "perturb.py")!r})
        tool = importlib.util.module_from_spec(spec); sys.modules["t"] = tool; spec.loader.exec_module(tool)
        from transformer_lib.experiments.minilm_pruning import sentence_sets
        lines = [f"line {{i}}" for i in range(40)]
        before = sentence_sets(2, 5, seed=0, lines=lines), random.Random(0).random()
        tool.install_seed_offset(1000, tool.DEFAULT_KEEP)
        after = sentence_sets(2, 5, seed=0, lines=lines), random.Random(0).random()
        print(before[0] == after[0], before[1] == after[1])
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["True", "False"], out.stderr
