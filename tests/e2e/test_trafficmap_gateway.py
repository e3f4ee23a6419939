"""gridroute's own gateway splits traffic in a TrafficMap's proportions: real processes on
127.0.0.1 (three fake model servers, `gridroute trafficmap reconcile` running its loop and
writing the overlay file, `gridroute gateway` watching it), a drain through
`gridroute traffic drain` moving new traffic off a cluster, an undrain bringing it back.

The weighted picker is an exact cycle (stride scheduling over the weights' ratio), so a
window of whole cycles gets each cluster exactly its share; the stated tolerance is one
request per cluster, what one retried request (an extra turn) could shift. Nothing here
is random, so there is no seed to state.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridroute.grid.ports import free_ports
from gridroute.grid.supervisor import Supervisor
from gridroute.wire.overlay import parse_overlay

pytestmark = pytest.mark.e2e

MODEL = "demo-model"
CLUSTERS = ("cluster-a", "cluster-b", "cluster-c")
START_S = 90.0
TOLERANCE = 1
"""Requests per cluster a window may differ from its exact share (see the docstring)."""


def _until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:g} s")
        time.sleep(0.05)


def _post(url: str) -> tuple[int, str]:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
            return resp.status, resp.headers.get("x-grid-provider", "-")
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, exc.headers.get("x-grid-provider", "-")


def _status(gateway: str) -> dict[str, Any]:
    with urllib.request.urlopen(gateway + "/grid/status", timeout=5) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return result


class Grid:
    def __init__(self, sup: Supervisor, workdir: Path) -> None:
        self.sup = sup
        self.dir = workdir
        self.control = workdir / "control.yaml"
        self.overlay = workdir / "overlay.json"
        self.gateway = ""

    def revision(self) -> int | None:
        rev = _status(self.gateway)["overlay"]["revision"]
        return None if rev is None else int(rev)

    def split(self, n: int) -> Counter[str]:
        got: Counter[str] = Counter()
        for _ in range(n):
            status, provider = _post(self.gateway)
            assert status == 200, (status, provider)
            got[provider.split("/")[0]] += 1
        return got

    def traffic(self, verb: str, cluster: str) -> None:
        argv = [sys.executable, "-m", "gridroute.cli", "traffic", verb, cluster]
        argv += ["--service", "chat", "--config", str(self.control)]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)

    def wait_revision(self, revision: int) -> None:
        """Until the control loop wrote `revision` and the gateway serves it."""
        _until(lambda: self.revision() == revision, f"the gateway serving revision {revision}")


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[Grid]:
    sup = Supervisor(tmp_path / "logs")
    g = Grid(sup, tmp_path)
    ports = dict(zip(CLUSTERS, free_ports(len(CLUSTERS)), strict=True))
    try:
        fakes = [
            sup.start(c, ["fake-server", "--port", str(p), "--model", MODEL, "--name", c,
                          "--service-ms", "1", "--tokens", "2"])
            for c, p in ports.items()
        ]  # fmt: skip
        sup.wait_announced(fakes, START_S)
        homes = [
            {"cluster": "cluster-a", "allocated": 4, "ready": 4},
            {"cluster": "cluster-b", "allocated": 2, "ready": 2},
            {"cluster": "cluster-c", "allocated": 6, "ready": 6},  # factor 0.5: counts 3
        ]
        for home in homes:
            # a DNS name: the published route's backend host cannot be an IP address
            home["endpoint"] = f"http://localhost:{ports[str(home['cluster'])]}"
        control = {
            "store": "state",
            "reconcileIntervalSeconds": 0.2,
            "probe": {"periodSeconds": 2, "timeoutSeconds": 1.5},  # real probes, passing
            "publish": {
                "directory": "routes",
                "overlay": "overlay.json",
                "globalGateway": "gateway-system/global",
                "backendPort": 80,
                "globalHostTemplate": "{{.Name}}.{{.Namespace}}.global.example.com",
            },
            "services": [
                {
                    "name": "chat",
                    "namespace": "demo",
                    "model": MODEL,
                    "routing": {"capacityFactors": {"cluster-c": "500m"}},
                    "homes": homes,
                }
            ],
        }
        g.control.write_text(yaml.safe_dump(control, sort_keys=False))
        sup.start("reconcile", ["trafficmap", "reconcile", "--config", str(g.control)])
        _until(g.overlay.exists, "the first overlay file", START_S)
        gateway = {
            "listen": "127.0.0.1:0",
            "sites": [
                {"name": c, "backend_url": f"http://127.0.0.1:{p}"} for c, p in ports.items()
            ],
            "models": [{"name": MODEL, "policy": "first"}],
            "health": {"enabled": False},
            "overlay": {"file": str(g.overlay), "poll_interval_s": 0.2},
        }
        (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(gateway, sort_keys=False))
        gw = sup.start("gateway", ["gateway", "--config", str(tmp_path / "gateway.yaml")])
        sup.wait_announced([gw], START_S)
        assert gw.url is not None
        g.gateway = gw.url
        _until(lambda: bool(_status(g.gateway)["ready"]), "gateway readiness", START_S)
        yield g
    finally:
        sup.stop_all()


def close_to(got: Counter[str], expected: dict[str, int]) -> bool:
    return set(got) <= set(expected) and all(
        abs(got.get(c, 0) - n) <= TOLERANCE for c, n in expected.items()
    )


def test_gateway_splits_by_the_maps_weights_and_a_drain_moves_traffic_off(grid: Grid) -> None:
    grid.wait_revision(1)
    (cap,) = parse_overlay(grid.overlay.read_text()).models
    assert [(c.site, c.traffic_weight) for c in cap.candidates] == [
        ("cluster-a", 4), ("cluster-b", 2), ("cluster-c", 3)
    ]  # fmt: skip
    before = grid.split(90)  # ten cycles of 4 + 2 + 3
    assert close_to(before, {"cluster-a": 40, "cluster-b": 20, "cluster-c": 30}), before

    grid.traffic("drain", "cluster-a")
    grid.wait_revision(2)
    drained = grid.split(50)  # ten cycles of 2 + 3
    assert drained["cluster-a"] == 0, drained  # no new request reaches a drained cluster
    assert close_to(drained, {"cluster-b": 20, "cluster-c": 30}), drained

    grid.traffic("undrain", "cluster-a")
    grid.wait_revision(3)
    after = grid.split(90)
    assert close_to(after, {"cluster-a": 40, "cluster-b": 20, "cluster-c": 30}), after
