"""The fault suite: `make test-faults` runs every scenario and writes the table;
`make test` runs the short ones (marked `fault_short`)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults import harness
from tests.faults.links import MECHANISM

ROWS: list[dict[str, Any]] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fault_short: a fault scenario short enough for make test")


def _scenario(item: pytest.Item) -> bool:
    """A test that starts processes (the checks of the harness itself always run)."""
    return Path(str(item.fspath)).name in {"test_scenarios.py", "test_impaired.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_all = os.environ.get("GRIDROUTE_FAULTS") == "all"
    skip = pytest.mark.skip(reason="long fault scenario: run `make test-faults`")
    for item in items:
        if "tests/faults/" not in str(item.fspath):
            continue
        item.add_marker(pytest.mark.timeout(400))  # process starts are slow on a busy box
        if not run_all and "fault_short" not in item.keywords and _scenario(item):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def answer_logs(tmp_path: Path) -> Iterator[None]:
    """Each test's fake servers log the answers they begin under its own tmp_path."""
    harness.ANSWER_LOGS.clear()
    harness.ANSWER_DIR[:] = [tmp_path]
    yield
    harness.ANSWER_LOGS.clear()
    harness.ANSWER_DIR.clear()


@pytest.fixture(scope="session", autouse=True)
def fault_report() -> Iterator[list[dict[str, Any]]]:
    yield ROWS
    out = os.environ.get("GRIDROUTE_FAULTS_REPORT")
    if out and ROWS:
        Path(out).write_text(json.dumps({"mechanism": MECHANISM, "rows": ROWS}, indent=1))
    if ROWS:
        print(f"\nfault suite partition mechanism: {MECHANISM}")
