"""Debian's `prometheus` package (it ships `prometheus` and `promtool`) for the tests
that check gridroute's metrics against the real thing.

When the binaries are missing and the tests run as root (as CI does), the fixture runs
`apt-get update && apt-get install -y prometheus` once per session; otherwise, or when
that fails, the tests that need it skip with the reason printed by `-ra`. The package's
service is never started: each test starts its own `prometheus` on 127.0.0.1.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "prometheus"


@dataclass(frozen=True, slots=True)
class PrometheusBinaries:
    prometheus: Path
    promtool: Path


def _found() -> PrometheusBinaries | None:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or tool is None:
        return None
    return PrometheusBinaries(Path(prom), Path(tool))


def _install() -> str | None:
    """Install the Debian package; None when it worked, else why not."""
    if os.geteuid() != 0:
        return "not root, so apt-get cannot install it"
    if shutil.which("apt-get") is None:
        return "no apt-get on this machine"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE],
    )
    for cmd in steps:
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(cmd)} failed: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["?"]
            return f"{' '.join(cmd)} exited {done.returncode}: {tail[0]}"
    return None


@functools.cache
def ensure() -> PrometheusBinaries | str:
    """The binaries, installing them if needed and possible; else why they are missing."""
    found = _found()
    if found is not None:
        return found
    why = _install()
    found = _found()
    if found is not None:
        return found
    return why or "apt-get ran but prometheus/promtool are still not on PATH"


def binaries() -> PrometheusBinaries:
    """The binaries, or skip the calling test saying why."""
    got = ensure()
    if isinstance(got, str):
        pytest.skip(f"Debian package {PACKAGE!r} (prometheus, promtool) unavailable: {got}")
    return got
