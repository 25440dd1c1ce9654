"""CONTRIBUTING.md: the house rules it numbers are the ones the code cites, and the files and commands it names exist.

The references are the repository itself: every "house rule N" written in the package, the tests, the tools, the
benchmarks and the notebooks must be a rule CONTRIBUTING.md states, and every path and make target it names must be
there (``make perturb`` excepted while it is being written: the page says so).
"""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "CONTRIBUTING.md").read_text()


def rules() -> dict[int, str]:
    section = TEXT.split("## The house rules", 1)[1].split("\n## ", 1)[0]
    return {int(n): title for n, title in re.findall(r"^(\d+)\. \*\*(.+?)\*\*", section, re.M | re.S)}


def test_the_rules_are_numbered_one_to_nine_in_order():
    assert list(rules()) == list(range(1, 10))


def test_every_house_rule_the_code_cites_is_a_rule_contributing_states():
    files = subprocess.run(
        [
            "git",
            "ls-files",
            "transformer_lib",
            "tests",
            "tools",
            "benchmarks",
            "notebooks",
            "scripts",
            "Makefile",
            "README.md",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    cited = {}
    for name in files:
        path = ROOT / name
        if path.suffix in {".py", ".ipynb", ".md", ""} and path.is_file():
            for n in re.findall(r"house rule (\d+)", path.read_text(errors="ignore")):
                cited.setdefault(int(n), set()).add(name)
    assert cited, "no citation found: the search itself is broken"
    assert {n: f for n, f in cited.items() if n not in rules()} == {}


def test_the_paths_and_make_targets_it_names_exist():
    paths = set(re.findall(r"`((?:tests|tools|transformer_lib|notebooks|benchmarks|\.github)/[\w./-]+\.\w+)`", TEXT))
    assert paths and all((ROOT / p).exists() or "NN" in p or "<" in p for p in paths), sorted(
        p for p in paths if not (ROOT / p).exists()
    )
    targets = set(re.findall(r"make ([a-z-]+)", TEXT)) - {"perturb"}
    makefile = (ROOT / "Makefile").read_text()
    assert targets and {t for t in targets if not re.search(rf"^{t}:", makefile, re.M)} == set()
