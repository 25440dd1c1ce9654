"""The notebook budget of ``make test`` (tests/notebook_budget.py), driven with fake clocks and fake reports: no real
timing decides a pass here (house rule 7)."""

from types import SimpleNamespace

import pytest

import notebook_budget
from notebook_budget import CALIBRATION_KEY, CPU_KEY, NotebookBudget, time_calibration


class FakeMachine:
    """A machine whose calibration takes ``calibration_s`` of CPU and whose notebooks' kernels use ``cpu_s[path]``
    of CPU (and ``wall_factor`` times as much wall time: a busy core stretches wall time only)."""

    def __init__(self, calibration_s, cpu_s, wall_factor=1.0):
        self.calibration_s, self.cpu_s, self.wall_factor = calibration_s, cpu_s, wall_factor
        self.children = 0.0  # the finished children's CPU seconds, as getrusage(RUSAGE_CHILDREN) reports them

    def run(self, budget: NotebookBudget, cells: int = 3):
        """Runs every notebook through the plugin's hooks as one pytest process would (no xdist), ``cells`` items
        each; the kernel's CPU time arrives when its last item's teardown has stopped it."""
        for path, cpu in self.cpu_s.items():
            for i in range(cells):
                item = SimpleNamespace(nodeid=f"{path}::Cell {i}")
                for when in ("setup", "call", "teardown"):
                    if when == "setup":
                        budget.pytest_runtest_setup(item)
                    if when == "teardown" and i == cells - 1:
                        self.children += cpu  # nbval stops (and reaps) the kernel in the last teardown
                    report = SimpleNamespace(
                        nodeid=item.nodeid, when=when, user_properties=[], duration=self.wall_factor * cpu / (3 * cells)
                    )
                    wrapper = budget.pytest_runtest_makereport(item, SimpleNamespace(when=when))
                    next(wrapper)
                    with pytest.raises(StopIteration):
                        wrapper.send(SimpleNamespace(get_result=lambda report=report: report))
                    budget.pytest_runtest_logreport(report)

    def budget(self, budget_units=100.0) -> NotebookBudget:
        return NotebookBudget(
            budget_units, slow_s_per_unit=0.9, calibrate=lambda: self.calibration_s, cpu_clock=lambda: self.children
        )


def _finish(budget: NotebookBudget) -> tuple[pytest.ExitCode, list[str]]:
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    budget.pytest_sessionfinish(session)
    lines = []
    budget.pytest_terminal_summary(
        SimpleNamespace(section=lambda title: lines.append(title), write_line=lambda line, **kw: lines.append(line))
    )
    return session.exitstatus, lines


BOOK = {"notebooks/01_a.ipynb": 3.0, "notebooks/02_b.ipynb": 6.0}  # CPU seconds here, with a 0.1 s calibration


def test_units_are_the_kernels_cpu_time_in_calibrations():
    machine = FakeMachine(0.1, BOOK)
    budget = machine.budget()
    machine.run(budget)
    assert budget.units() == pytest.approx({"notebooks/01_a.ipynb": 30.0, "notebooks/02_b.ipynb": 60.0})
    assert budget.cpu_s == pytest.approx(BOOK)  # each notebook's own kernel, not the one before it
    status, lines = _finish(budget)
    assert status == pytest.ExitCode.OK
    row = next(line for line in lines if line.endswith("notebooks/02_b.ipynb"))
    assert row.split()[:5] == ["60.0", "6.0", "6.0", "100.0", "54"]  # units, CPU s, wall s, calibration ms, slower s


def test_a_machine_three_times_slower_or_a_busy_core_passes():
    for machine in (
        FakeMachine(0.3, {nb: 3 * s for nb, s in BOOK.items()}),  # everything 3x slower
        FakeMachine(0.1, BOOK, wall_factor=2.0),
    ):  # one busy core: wall time doubles, CPU time does not
        budget = machine.budget(budget_units=61.0)
        machine.run(budget)
        assert budget.units() == pytest.approx({"notebooks/01_a.ipynb": 30.0, "notebooks/02_b.ipynb": 60.0})
        assert _finish(budget)[0] == pytest.ExitCode.OK


def test_a_notebook_that_grew_three_times_fails_the_session_with_a_line_naming_it():
    grown = {**BOOK, "notebooks/02_b.ipynb": 3 * BOOK["notebooks/02_b.ipynb"]}
    machine = FakeMachine(0.1, grown)
    budget = machine.budget(budget_units=100.0)  # 60 units fit; 180 do not
    machine.run(budget)
    assert budget.over_budget() == pytest.approx({"notebooks/02_b.ipynb": 180.0})
    status, lines = _finish(budget)
    assert status == pytest.ExitCode.TESTS_FAILED
    assert any(line.startswith("FAILED: notebooks/02_b.ipynb took 180.0 calibrations") for line in lines), lines


def test_reports_from_a_worker_carry_the_measurement_to_the_controller():
    """Under xdist the controller sees only reports: the last CPU value per notebook and the wall time of every
    phase count; other files are not judged."""
    budget = NotebookBudget(
        50.0, slow_s_per_unit=1.0, calibrate=lambda: pytest.fail("not here"), cpu_clock=lambda: pytest.fail("not here")
    )
    reports = [
        ("notebooks/01_a.ipynb::Cell 0", 1.0, [(CALIBRATION_KEY, 0.2), (CPU_KEY, 0.0)]),
        ("notebooks/01_a.ipynb::Cell 1", 2.0, [[CALIBRATION_KEY, 0.2], [CPU_KEY, 0.0]]),  # JSON: lists
        ("notebooks/01_a.ipynb::Cell 1", 0.5, [[CALIBRATION_KEY, 0.2], [CPU_KEY, 11.0]]),
        ("tests/test_x.py::test_slow", 500.0, []),
    ]
    for nodeid, duration, props in reports:
        budget.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=duration, user_properties=props))
    assert budget.units() == pytest.approx({"notebooks/01_a.ipynb": 55.0})
    assert budget.wall_s == pytest.approx({"notebooks/01_a.ipynb": 3.5})
    assert _finish(budget)[0] == pytest.ExitCode.TESTS_FAILED


def test_a_failed_session_keeps_its_own_status():
    machine = FakeMachine(0.1, {"notebooks/01_a.ipynb": 30.0})
    budget = machine.budget(budget_units=100.0)
    machine.run(budget)
    session = SimpleNamespace(exitstatus=pytest.ExitCode.INTERRUPTED)
    budget.pytest_sessionfinish(session)
    assert session.exitstatus == pytest.ExitCode.INTERRUPTED


def test_the_calibration_is_the_median_of_its_timed_runs_after_a_warm_up():
    ticks = iter([0.0, 5.0, 10.0, 11.0, 20.0, 20.3, 30.0, 30.2, 40.0, 41.0])  # runs of 5, 1, 0.3, 0.2, 1 s
    calls = []
    seconds = time_calibration(work=lambda: calls.append(1), clock=lambda: next(ticks), repeats=5)
    assert len(calls) == 6 and seconds == pytest.approx(1.0)


def test_the_calibration_work_is_seeded():
    import torch

    torch.manual_seed(123)
    notebook_budget.calibration_work()
    after_first = torch.rand(1)
    torch.manual_seed(123)
    notebook_budget.calibration_work()
    assert torch.equal(after_first, torch.rand(1)), "calibration_work must not move the global random stream"


def test_the_budget_is_about_90_seconds_on_the_slower_machine():
    assert 80 <= notebook_budget.BUDGET_UNITS * notebook_budget.SLOW_S_PER_UNIT <= 100
