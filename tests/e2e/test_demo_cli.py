"""`gridroute demo` as a user runs it: phases, summary, plot, and nothing left running,
whether it ends on its own or is interrupted."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gridroute.grid.launcher import leftover_pids

pytestmark = pytest.mark.e2e

SMALL = ["--sites", "hub:16,west:16,east:8", "--service-ms", "200"]


def _demo(*args: str) -> list[str]:
    return [sys.executable, "-m", "gridroute.cli", "demo", *SMALL, *args]


def _workdir(output: str) -> str:
    found = re.search(r"logs (\S+)/logs", output)
    assert found, output
    return found.group(1)


def test_a_short_demo_runs_every_phase_and_cleans_up(tmp_path: Path) -> None:
    plot = tmp_path / "demo.png"
    proc = subprocess.run(
        _demo("--duration", "16", "--plot", str(plot)),
        capture_output=True, text=True, timeout=90, cwd=tmp_path,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for text in ("under capacity", "partition east", "east returns", "past capacity"):
        assert text in out, out
    assert "whole run" in out and "stopped 7 processes" in out
    assert f"plot: {plot}" in out
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert leftover_pids(_workdir(out)) == []


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        _demo("--duration", "60", "--plot", str(tmp_path / "never.png")),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        start_new_session=True,
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
    assert leftover_pids(_workdir(out)) == []
    assert not (tmp_path / "never.png").exists()
