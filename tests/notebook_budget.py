"""Each notebook's execution budget, in units of the machine it runs on (house rules 7 and 8).

A wall-clock limit fails a machine that is merely slower or busy, which is a timed test. Instead, right before each
notebook the worker that runs it times a small fixed piece of the book's own kind of work (``calibration_work``:
a few seeded training steps and a forward pass of a tiny GPT) on CPU time; the notebook's kernel is measured on CPU
time too (the kernel is a child process of the worker: its user + system time arrives in
``getrusage(RUSAGE_CHILDREN)`` when nbval stops it). The notebook's size is then

    units = notebook CPU seconds / calibration CPU seconds

a ratio of two amounts of work measured on the same machine at the same time: a machine three times slower makes
both three times longer, and a busy core stretches wall time, not CPU time. A notebook that grew three times
grows its units three times.

``BUDGET_UNITS`` is about 90 s of ``make test`` on the slower machine of house rule 8 (2 cores of an AVX2 AMD EPYC):
``SLOW_S_PER_UNIT`` (seconds there per unit) was fitted on notebooks whose nbval times there are known (see its
comment). Where ``getrusage`` is missing (Windows), both are measured in wall-clock seconds instead.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from typing import Callable

import pytest

try:
    import resource
except ImportError:  # Windows
    resource = None

# Seconds of `make test` (nbval, two workers) on the slower machine per unit. Fitted on 2a691fc's notebooks: their
# nbval times there (issue 23: 00 11.7, 02 13.5, 03 43.0, 07 78.5 s) over the units measured for the same notebooks
# on an AVX-512 AMD EPYC (two workers, a loaded shared machine: 103, 133, 451, 814 units; calibration 53-61 ms):
# 0.113, 0.102, 0.095, 0.096 s per unit; rounded to 0.1.
SLOW_S_PER_UNIT = 0.1
# About 90 s there. A notebook at this many units is that heavy whatever machine runs it.
BUDGET_UNITS = 900.0

# the property names carried from an xdist worker to the controller on each notebook item's reports
CALIBRATION_KEY, CPU_KEY = "notebook_calibration_s", "notebook_cpu_s"


def calibration_work() -> None:
    """The fixed piece of work: a seeded tiny GPT (2 layers, d_model 64), 4 AdamW steps on a (8, 64) batch, then a
    no-grad forward pass of a (16, 64) batch. Matrix products, attention, LayerNorm, softmax and autograd, like the
    chapters; runs in ~0.1 s of CPU on a recent core."""
    import torch

    from transformer_lib.models.configs import GPTConfig

    from transformer_lib.models.transformer import GPT

    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=96, block_size=64, n_layers=2, n_heads=4, d_model=64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 96, (8, 65), generator=gen)
    for _ in range(4):
        _, loss = model(ids[:, :-1], ids[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        model(torch.randint(0, 96, (16, 64), generator=gen))


def time_calibration(
    work: Callable[[], None] = calibration_work, clock: Callable[[], float] = time.process_time, repeats: int = 5
) -> float:
    """Seconds of ``clock`` that one ``work()`` takes: the median of ``repeats`` runs after one warm-up run."""
    work()
    times = []
    for _ in range(repeats):
        t0 = clock()
        work()
        times.append(clock() - t0)
    return statistics.median(times)


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished (waited-for) child processes, e.g. stopped kernels."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _is_notebook(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0].endswith(".ipynb")


class NotebookBudget:
    """A pytest plugin. In the process that runs a notebook's items (an xdist worker, or the only process): before
    the first item of each notebook, times the calibration, then follows the CPU time of the notebook's kernel,
    attaching both to every report of its items. Where the reports arrive (the controller): sums the wall time of the
    items (three phases each, so kernel start and stop count) and keeps the last CPU time per notebook; at the end
    prints every notebook's units beside its absolute times, and fails the session when one is over the budget.

    ``calibrate`` and ``cpu_clock`` are injectable so that a test can drive it with fake clocks."""

    def __init__(
        self,
        budget_units: float = BUDGET_UNITS,
        slow_s_per_unit: float = SLOW_S_PER_UNIT,
        calibrate: Callable[[], float] | None = None,
        cpu_clock: Callable[[], float] | None = None,
    ):
        self.budget_units = budget_units
        self.slow_s_per_unit = slow_s_per_unit
        self.clock_name = "CPU" if resource is not None else "wall-clock"
        if calibrate is None:
            clock = time.process_time if resource is not None else time.perf_counter
            calibrate = lambda: time_calibration(clock=clock)  # noqa: E731
        if cpu_clock is None:
            cpu_clock = children_cpu_s if resource is not None else time.perf_counter
        self.calibrate, self.cpu_clock = calibrate, cpu_clock
        # worker side
        self._current: str | None = None
        self._calibration_s = self._cpu_start = 0.0
        # controller side
        self.wall_s: dict[str, float] = defaultdict(float)
        self.cpu_s: dict[str, float] = defaultdict(float)
        self.calibration_s: dict[str, float] = {}

    # ---- worker side: measure
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        path = item.nodeid.split("::", 1)[0]
        if _is_notebook(item.nodeid) and path != self._current:  # the first item: nbval starts the kernel after this
            self._current = path
            self._calibration_s = self.calibrate()
            self._cpu_start = self.cpu_clock()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if _is_notebook(item.nodeid) and self._current == item.nodeid.split("::", 1)[0]:
            report.user_properties.append((CALIBRATION_KEY, self._calibration_s))
            report.user_properties.append((CPU_KEY, self.cpu_clock() - self._cpu_start))

    # ---- controller side: collect and judge
    def pytest_runtest_logreport(self, report):
        if not _is_notebook(report.nodeid):
            return
        path = report.nodeid.split("::", 1)[0]
        self.wall_s[path] += report.duration
        for name, value in getattr(report, "user_properties", ()):
            if name == CALIBRATION_KEY:
                self.calibration_s[path] = value
            elif name == CPU_KEY:  # cumulative since the notebook began: the last report (its teardown) has it all
                self.cpu_s[path] = max(self.cpu_s[path], value)

    def units(self) -> dict[str, float]:
        """Each notebook's CPU time in calibrations (notebooks without a calibration are not judged)."""
        return {nb: self.cpu_s[nb] / c for nb, c in self.calibration_s.items() if c > 0}

    def over_budget(self) -> dict[str, float]:
        return {nb: u for nb, u in self.units().items() if u > self.budget_units}

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.over_budget() and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.wall_s:
            return
        write = terminalreporter.write_line
        terminalreporter.section(
            f"notebook budgets ({self.clock_name} time in calibrations; budget "
            f"{self.budget_units:.0f} each, about {self.budget_units * self.slow_s_per_unit:.0f}"
            " s on the slower machine)"
        )
        write(f"{'units':>7} {self.clock_name + ' s':>7} {'wall s':>7} {'calib. ms':>9} {'~slower s':>9}  notebook")
        units = self.units()
        for nb in sorted(self.wall_s):
            u = units.get(nb)
            u_text = f"{u:7.1f}" if u is not None else f"{'-':>7}"
            slow = f"{u * self.slow_s_per_unit:9.0f}" if u is not None else f"{'-':>9}"
            calib = self.calibration_s.get(nb)
            calib_text = f"{calib * 1e3:9.1f}" if calib is not None else f"{'-':>9}"
            write(f"{u_text} {self.cpu_s.get(nb, 0.0):7.1f} {self.wall_s[nb]:7.1f} {calib_text} {slow}  {nb}")
        if units:
            write(
                f"{sum(units.values()):7.1f} {sum(self.cpu_s.values()):7.1f} {sum(self.wall_s.values()):7.1f} "
                f"{'':9} {sum(units.values()) * self.slow_s_per_unit:9.0f}  all notebooks (serial sum)"
            )
        for nb, u in sorted(self.over_budget().items()):
            write(
                f"FAILED: {nb} took {u:.1f} calibrations ({self.cpu_s[nb]:.1f} s of {self.clock_name} time, "
                f"{self.wall_s[nb]:.1f} s wall), over the budget of {self.budget_units:.0f} per notebook "
                "(house rule 8)",
                red=True,
                bold=True,
            )
