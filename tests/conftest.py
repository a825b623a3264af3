"""Hooks for the whole suite: every test in exactly one tier, a fixed seed for every test, and the fault
corpus's tally. What the tests share besides lives in helpers.py."""

from __future__ import annotations

import os
import tempfile

import pytest
import torch

# The tiers (CONTRIBUTING.md): `unit` runs no Trainer and no subprocess and takes a second or two;
# `integration` runs tiny Trainer runs or the command line end to end; `slow` takes more than about 10 s and
# states its own time limit, since the default one (pyproject.toml's --timeout) is meant for the others.
TIERS = ("unit", "integration", "slow")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: an untiered test fails whatever the selection
def pytest_collection_modifyitems(config, items):
    wrong = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {' and '.join(tiers) or 'no tier'}")
        elif tiers == ["slow"] and item.get_closest_marker("timeout") is None:
            wrong.append(f"{item.nodeid}: slow without its own @pytest.mark.timeout(seconds)")
    if wrong:
        more = f"\n  ... and {len(wrong) - 20} more" if len(wrong) > 20 else ""
        raise pytest.UsageError(
            "each test needs exactly one tier marker, unit, integration or slow (CONTRIBUTING.md):\n  "
            + "\n  ".join(wrong[:20])
            + more
        )


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
    # Under pytest-xdist each worker takes its share of the cores: N workers each using every core would
    # run N times as many threads as there are cores.
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(workers)))
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
