"""`gridroute trafficmap demo`: a live map over real operators changes as a site is
drained, probed down and restored, and the published route follows each step."""

from __future__ import annotations

import pytest

from gridroute.demo.trafficmap import run_trafficmap_demo

pytestmark = pytest.mark.e2e


def test_live_map_follows_drain_probe_failure_and_restore() -> None:
    lines: list[str] = []
    assert run_trafficmap_demo(period_s=0.3, timeout_s=20.0, out=lines.append) == 0
    steps = [line for line in lines if "route weights:" in line]
    assert len(steps) == 5
    expected = [
        "cluster-a=2 cluster-b=1",
        "cluster-a=0 cluster-b=1",
        "cluster-a=2 cluster-b=1",
        "cluster-a=1 cluster-b=0",
        "cluster-a=2 cluster-b=1",
    ]
    for line, weights in zip(steps, expected, strict=True):
        assert weights in line and " ok " in line, line
    assert any("OverrideActive=True/OverridesApplied" in line for line in lines)
