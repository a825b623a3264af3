"""Hooks for the whole suite: a fixed seed for every test, and the fault corpus's tally.
What the tests share besides lives in helpers.py."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    yield


# The fault and bad-input corpus: tests marked `@pytest.mark.fault("category", kinds=N)` each try N kinds
# of one fault category (a parametrised test: N per parameter); the end of the run prints, per
# category, how many kinds were tried and held.
_fault_tally: dict[str, list[int]] = {}


def pytest_configure(config):
    # What the suite caches (weights, the CPU kernels timed once per machine) stays out of the user's cache.
    os.environ["VITLAB_CACHE"] = tempfile.mkdtemp(prefix="vitlab-test-cache-")
    config.addinivalue_line("markers", "fault(category, kinds=1): a test of the fault and bad-input corpus")


def pytest_runtest_logreport(report):
    marker = next((m for m in getattr(report, "fault_markers", [])), None)
    if marker is None:
        return
    category, kinds = marker
    tried_held = _fault_tally.setdefault(category, [0, 0])
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        tried_held[0] += kinds
        tried_held[1] += kinds if report.passed else 0
    elif report.when == "teardown" and report.failed and getattr(report, "fault_call_passed", False):
        tried_held[1] -= kinds  # a fixture that fails after the test did not hold either


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.fault_markers = [(m.args[0], int(m.kwargs.get("kinds", 1))) for m in item.iter_markers(name="fault")][:1]
    if any(kinds < 1 for _, kinds in report.fault_markers):
        raise pytest.UsageError(f"{item.nodeid}: fault(kinds=N) needs N >= 1")
    if call.when == "call":
        item.fault_call_passed = report.passed
    report.fault_call_passed = getattr(item, "fault_call_passed", False)


def pytest_terminal_summary(terminalreporter):
    if not _fault_tally:
        return
    terminalreporter.section("fault and bad-input corpus")
    for category, (tried, held) in sorted(_fault_tally.items()):
        terminalreporter.write_line(f"{category}: {held} of {tried} kinds held")
