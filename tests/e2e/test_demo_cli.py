"""`gridroute demo` as a user runs it: phases, summary, plot, and nothing left running,
whether it ends on its own or is interrupted."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gridroute.grid.launcher import leftover_pids
from tests.demo.readme_sample import (
    differences,
    progress_phases,
    readme_sample,
    shape,
    table_phases,
)

pytestmark = pytest.mark.e2e

SMALL = ["--sites", "hub:16,west:16,east:8", "--service-ms", "200"]


def _demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "gridroute.cli", "demo", *SMALL, *args]


def _env(tmp_path: Path) -> dict[str, str]:
    """The demo makes its work dir under TMPDIR: here, so leftovers can be found after
    a clean run has deleted it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp)}


def _status(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(base_url + "/grid/status", timeout=5) as resp:
        return dict(json.loads(resp.read()))


def _selections(base_url: str) -> dict[str, int]:
    return dict(_status(base_url)["selections"]["total"])


def _leftovers(tmp_path: Path) -> list[int]:
    return leftover_pids(f"{tmp_path / 'tmp'}/", prefix=True)


def test_a_short_demo_runs_every_phase_and_cleans_up(tmp_path: Path) -> None:
    plot = tmp_path / "demo.png"
    proc = subprocess.run(
        _demo("--duration", "16", "--plot", str(plot)),
        capture_output=True, text=True, timeout=90, cwd=tmp_path, env=_env(tmp_path),
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for text in ("under capacity", "partition east", "east returns", "past capacity"):
        assert text in out, out
    assert "whole run" in out and "stopped 7 processes" in out
    assert "served per client min / median / max" in out and "Jain's fairness index" in out
    assert f"plot: {plot}" in out
    assert "logs" not in out  # the work dir is gone: no path to print
    assert list((tmp_path / "tmp").iterdir()) == []
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert _leftovers(tmp_path) == []
    # README.md's sample `make demo` output has this run's shape: the same kinds of
    # line in the same order, the same phases and columns, the same sentences.
    sample, live = readme_sample(), out.splitlines()
    assert differences(shape(sample), shape(live)) == [], out
    assert table_phases(live) == table_phases(sample)
    phases = table_phases(live)  # 4 s phases: not every one gets a progress line
    shown = progress_phases(live)
    assert shown and shown == sorted(shown, key=phases.index), out


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        _demo("--duration", "60", "--plot", str(tmp_path / "never.png")),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        start_new_session=True, env=_env(tmp_path),
    )  # fmt: skip
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 60
    while "up in" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert "up in" in seen, seen
    time.sleep(2.0)  # traffic is flowing
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    out = seen + rest
    assert proc.returncode == 130, out
    assert "interrupted" in out and "stopped 7 processes" in out
    assert _leftovers(tmp_path) == []
    assert not (tmp_path / "never.png").exists()


def test_a_failed_start_keeps_the_logs_and_says_where(tmp_path: Path) -> None:
    # A negative service time makes every fake server refuse its config at start.
    proc = subprocess.run(
        _demo("--service-ms", "-5", "--duration", "1"),
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=_env(tmp_path),
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "the local grid failed" in out
    found = re.search(r"logs kept in (\S+)", out)
    assert found, out
    logs = Path(found.group(1))
    assert logs.is_dir() and logs.is_relative_to(tmp_path / "tmp")
    assert "validation error" in "".join(p.read_text() for p in logs.glob("*.log"))
    assert _leftovers(tmp_path) == []


def test_serve_alone_is_light_traffic_until_ctrl_c(tmp_path: Path) -> None:
    # 40 slots: --serve keeps 4 clients (10 %), not the 24 of the phases.
    proc = subprocess.Popen(
        _demo("--duration", "0", "--serve"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        start_new_session=True, env=_env(tmp_path),
    )  # fmt: skip
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 60
    while "keep sending" not in seen and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert "4 clients (10 % of the slots) keep sending" in seen, seen
    api = re.search(r"OpenAI API: (\S+)/v1", seen)
    assert api, seen
    in_flight = []
    while sum(_selections(api.group(1)).values()) < 20 and time.monotonic() < deadline:
        in_flight.append(sum(s["in_flight"] for s in _status(api.group(1))["sites"]))
        time.sleep(0.05)
    assert sum(_selections(api.group(1)).values()) >= 20  # traffic flows...
    assert max(in_flight) <= 4  # ...from 4 clients at most
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    out = seen + rest
    assert proc.returncode == 0, out  # Ctrl-C is how --serve ends, not a failure
    assert _leftovers(tmp_path) == []
