"""`gridroute demo trafficmap` (or `gridroute trafficmap demo`): a live TrafficMap over
the local grid's operators.

Two fake sites (cluster-a, cluster-b) with their operators run as real processes on
127.0.0.1 (`LocalGrid`, mutual TLS). The control plane reconciles one service homed on
both: ready replicas come live from the operators, probes go to each site's model API,
cluster-a counts twice (capacity factor 2, its GPUs are faster). Then, step by step:
drain cluster-a, undrain it, make cluster-b's model API fail its probes, restore it;
after each step the published HTTPRoute's weights and the map's conditions are printed.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.trafficmap import Drain
from gridroute.grid.layout import PROVIDER, GridSpec, LocalSite, operator_url
from gridroute.wire.trafficmap import TrafficMap

SERVICE, NAMESPACE = "chat", "demo"
SITES = ("cluster-a", "cluster-b")


def control_yaml(grid: Any, workdir: Path, period_s: float) -> dict[str, Any]:
    certs = grid.certs
    return {
        "store": str(workdir / "state"),
        "reconcileIntervalSeconds": period_s,
        "operatorTLS": {
            "ca": str(certs / "ca.crt"),
            "cert": str(certs / SITES[0] / "client.crt"),
            "key": str(certs / SITES[0] / "client.key"),
        },
        "probe": {
            "path": "/v1/models",
            "periodSeconds": period_s,
            "timeoutSeconds": period_s * 0.8,
            "failureThreshold": 2,
            "successThreshold": 2,
        },
        "publish": {
            "directory": str(workdir / "routes"),
            "globalGateway": "gateway-system/global",
            "backendPort": 80,
            "globalHostTemplate": "{{.Name}}.{{.Namespace}}.global.example.com",
        },
        "services": [
            {
                "name": SERVICE,
                "namespace": NAMESPACE,
                "mode": "Split",
                "routing": {"capacityFactors": {SITES[0]: "2"}},
                "homes": [
                    {
                        "cluster": site,
                        "endpoint": _by_name(grid.backend_urls[site]),
                        "allocated": 1,
                        "operator": {
                            "url": operator_url(grid.operator_ports[site]),
                            "provider": PROVIDER,
                        },
                    }
                    for site in SITES
                ],
            }
        ],
    }


def _by_name(url: str) -> str:
    """`url` with its loopback address spelled `localhost`: a route's backend host must be
    a DNS name (an ExternalName Service cannot alias an IP address; OME refuses one)."""
    return url.replace("//127.0.0.1:", "//localhost:", 1)


def route_weights(routes: Path) -> dict[str, int]:
    """The published route's weight per cluster (backends named by their Service label)."""
    path = routes / NAMESPACE / f"{SERVICE}-global.yaml"
    if not path.exists():
        return {}
    objs = list(yaml.safe_load_all(path.read_text()))
    cluster = {
        o["metadata"]["name"]: o["metadata"]["labels"]["ome.io/workload-cluster"]
        for o in objs
        if o["kind"] == "Service"
    }
    refs = objs[0]["spec"]["rules"][0]["backendRefs"]
    return {cluster[r["name"]]: r["weight"] for r in refs}


def _conditions(tm: TrafficMap | None) -> str:
    if tm is None:
        return "(no map)"
    parts = []
    for kind in ("Routable", "OverrideActive", "Published"):
        c = tm.status.condition(kind)
        parts.append(f"{kind}={c.status}/{c.reason}" if c is not None else f"{kind}=?")
    return " ".join(parts)


async def _steps(
    grid: Any, workdir: Path, period_s: float, out: Callable[[str], None], timeout_s: float
) -> bool:
    from gridroute.grid.launcher import http_json

    path = workdir / "control.yaml"
    path.write_text(yaml.safe_dump(control_yaml(grid, workdir, period_s), sort_keys=False))
    rec = Reconciler(path)
    store = Store(workdir / "state")
    routes = workdir / "routes"
    fake_b = grid.backend_urls[SITES[1]]
    ok = True

    async def settle(what: str, want: dict[str, int]) -> None:
        nonlocal ok
        deadline = time.monotonic() + timeout_s
        passes = 0
        async with aiohttp.ClientSession() as session:
            while True:
                await rec.run_once(session)
                passes += 1
                got = route_weights(routes)
                if got == want or time.monotonic() > deadline:
                    break
                await asyncio.sleep(period_s)
        tm = store.read_map(NAMESPACE, SERVICE)
        shown = " ".join(f"{c}={w}" for c, w in got.items()) or "(no route)"
        mark = "ok" if got == want else f"EXPECTED {want}"
        ok = ok and got == want
        out(f"{what:<34} route weights: {shown:<26} {mark:<4} after {passes} pass(es)")
        out(f"{'':<34} {_conditions(tm)}")

    await settle("start (cluster-a factor 2)", {SITES[0]: 2, SITES[1]: 1})
    store.write_drains(NAMESPACE, SERVICE, (Drain("maintenance-a", SITES[0], "demo"),))
    await settle("traffic drain cluster-a", {SITES[0]: 0, SITES[1]: 1})
    store.write_drains(NAMESPACE, SERVICE, ())
    await settle("traffic undrain cluster-a", {SITES[0]: 2, SITES[1]: 1})
    http_json(f"{fake_b}/admin/fail", {"status": 503})
    await settle("cluster-b fails its probes (503)", {SITES[0]: 1, SITES[1]: 0})
    http_json(f"{fake_b}/admin/recover", {})
    await settle("cluster-b restored", {SITES[0]: 2, SITES[1]: 1})
    return ok


def run_trafficmap_demo(
    period_s: float = 0.5, timeout_s: float = 20.0, out: Callable[[str], None] = print
) -> int:
    """Start the grid, walk the steps, stop the grid; 0 when every step showed its weights."""
    from gridroute.grid.launcher import LocalGrid

    spec = GridSpec(
        sites=(LocalSite(SITES[0], 32), LocalSite(SITES[1], 32)),
        gateway_sites=(SITES[0],),
        interval_s=period_s,
    )
    out("starting two sites and their operators on 127.0.0.1 ...")
    with LocalGrid(spec) as grid, tempfile.TemporaryDirectory(prefix="gridroute-tm-") as tmp:
        out(f"operators: {', '.join(operator_url(p) for p in grid.operator_ports.values())}")
        ok = asyncio.run(_steps(grid, Path(tmp), period_s, out, timeout_s))
    out("every step showed the expected weights" if ok else "some step did not settle")
    return 0 if ok else 1
