"""Shared test setup.

* Tests marked ``@pytest.mark.cuda`` are skipped when no CUDA GPU is visible (the marker is registered in
  ``pyproject.toml``). ``requires_cuda`` is the same skip as a decorator for a single test.
* Every test starts from the same torch seed, so a failure reproduces.
* ``make_cache`` gives a minimal object with the library's KV-cache protocol.
* Torch runs on one thread (see below).
* ``browser_path``: the Chromium or Chrome the browser tests drive (see ``devtools.find_browser``); skipped with
  one line saying how to enable them when there is none, a failure instead when ``REQUIRE_BROWSER=1`` (CI).
* Each notebook executed by nbval (``make test``) must stay within ``NOTEBOOK_BUDGET_UNITS`` (house rule 8): its
  kernel's CPU time in units of a calibration timed right before it in the same worker (``notebook_budget.py``);
  every notebook's units and absolute times are printed at the end of the session, and one over the budget fails
  the session (exit status 1) with a line naming it.
* ``--skip-passed-notebooks`` (``make test``): a notebook unchanged, with everything it imports, since it passed in
  this checkout is skipped (``notebook_record.py``).
"""

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    # Triton's interpreter (tests/kernels/test_triton_kernel.py) must be chosen before triton is first imported, and
    # PyTorch imports it itself (e.g. on entering a TorchDispatchMode): so here, before any test runs
    os.environ.setdefault("TRITON_INTERPRET", "1")

from devtools import BROWSER_HELP, find_browser, no_built_site  # noqa: F401 (no_built_site: for the tests)
from notebook_budget import BUDGET_UNITS, NotebookBudget
from notebook_record import OPTION as SKIP_PASSED, PassedNotebooks

# The tests use tiny tensors, which gain nothing from intra-op threads; on a busy 2-core machine two threads
# spinning against other processes made them ~6x slower. One thread keeps the suite fast everywhere.
torch.set_num_threads(1)

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")


def pytest_collection_modifyitems(config, items):
    if not HAS_CUDA:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (marked @pytest.mark.cuda)")
        for item in items:
            if item.get_closest_marker("cuda") is not None:
                item.add_marker(skip)
    browser_items = [item for item in items if item.get_closest_marker("browser") is not None]
    if browser_items and os.environ.get("REQUIRE_BROWSER") != "1" and find_browser() is None:
        # a skip mark (not only the fixture's skip) so that `-rs` folds them into one line per file
        skip = pytest.mark.skip(reason=f"no Chromium or Chrome found: {BROWSER_HELP}")
        for item in browser_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def browser_path() -> Path:
    """The browser for the tests marked ``browser``; skip (or fail, with ``REQUIRE_BROWSER=1``) without one."""
    path = find_browser()
    if path is None:
        message = f"no Chromium or Chrome found: {BROWSER_HELP}"
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"REQUIRE_BROWSER=1 but {message}")
        pytest.skip(message)
    return path


# house rule 8: each notebook's budget in units of the machine (tests/notebook_budget.py); the variable exists to see
# it fail
NOTEBOOK_BUDGET_UNITS = float(os.environ.get("NOTEBOOK_BUDGET_UNITS", BUDGET_UNITS))


def pytest_addoption(parser):
    parser.addoption(
        SKIP_PASSED,
        action="store_true",
        help="skip a notebook whose inputs are unchanged since it passed in this checkout (tests/notebook_record.py)",
    )


def pytest_configure(config):
    # Registered as plugins (not hooks of this conftest), so that they see the items under notebooks/ too.
    budget = NotebookBudget(NOTEBOOK_BUDGET_UNITS)
    config.pluginmanager.register(budget, "notebook-budget")
    if config.getoption(SKIP_PASSED):
        config.pluginmanager.register(PassedNotebooks(budget=budget), "passed-notebooks")


@pytest.fixture(autouse=True)
def _seed_torch():
    torch.manual_seed(0)


class ConcatCache:
    """The smallest object with the library's cache protocol (``get_seq_length``, ``update``): it concatenates
    each layer's keys and values along time. Used to check cached decoding against a full recompute."""

    def __init__(self):
        self.keys, self.values = {}, {}

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[-2] if layer_idx in self.keys else 0

    def update(self, k, v, layer_idx: int):  # k, v: (B, H, T, d_head)
        if layer_idx in self.keys:
            k = torch.cat([self.keys[layer_idx], k], dim=-2)
            v = torch.cat([self.values[layer_idx], v], dim=-2)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v


@pytest.fixture
def make_cache():
    """A factory of empty ``ConcatCache``s."""
    return ConcatCache
