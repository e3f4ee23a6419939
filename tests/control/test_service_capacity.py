"""A service's own capacity policy (`routing.capacity`): it replaces `capacityPolling`
whole for that service, or turns polling off for it; each (provider, policy) pair is its
own poll window and cadence. Driven through the reconcile loop against a real HTTP
operator stand-in on 127.0.0.1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gridroute.control.config import ServiceConfig, parse
from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.capacityreport import Attempt, CapacityReport, due, kept
from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.trafficmap import TrafficMap

from .controlfiles import Clock, seed, write
from .livehomes import free_port

NS = "llama-demo"
GLOBAL = {"enabled": True, "periodSeconds": 1, "timeoutSeconds": 0.5, "maxAgeSeconds": 30}


class Operator:
    """An operator's `/status` (4 ready per provider) and capacity paths: `servable[path]`
    answers `{servable, observedAt: now}` there (by the test's clock); every request is
    logged as (method, path)."""

    def __init__(self, clock: Clock, servable: dict[str, int]) -> None:
        self.clock, self.servable = clock, servable
        self.port = free_port()
        self.seen: list[tuple[str, str]] = []
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def polls(self) -> list[tuple[str, str]]:
        return [s for s in self.seen if s[1] != "/status"]

    async def _any(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path))
        if request.path == "/status":
            providers = [{"name": p, "latest": {"ready": 4}} for p in ("pool-a", "pool-b")]
            return web.json_response({"providers": providers})
        if request.path in self.servable:
            body = {"servable": self.servable[request.path], "observedAt": self.clock.now}
            return web.json_response(body)
        return web.json_response({}, status=404)

    async def __aenter__(self) -> Operator:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def service(name: str, op: str, capacity: dict[str, Any] | None = None) -> dict[str, Any]:
    """`name` with cluster-a on pool-a of the operator at `op` (allocated 4, 4 ready) and
    cluster-b static (2)."""
    svc = seed()["services"][0]
    svc["name"] = name
    a, b = svc["homes"]
    del a["ready"]
    a["operator"] = {"url": op, "provider": "pool-a"}
    b["endpoint"] = b["endpoint"].replace("llama-chat", name)
    a["endpoint"] = a["endpoint"].replace("llama-chat", name)
    if capacity is not None:
        svc["routing"] = {"capacity": capacity}
    return svc


def config(*services: dict[str, Any], polling: dict[str, Any] | None = None) -> dict[str, Any]:
    data = seed()
    data["capacityPolling"] = GLOBAL if polling is None else polling
    data["services"] = list(services)
    return data


def the_map(tmp: Path, name: str = "llama-chat") -> TrafficMap:
    tm = Store(tmp / "state").read_map(NS, name)
    assert tm is not None
    return tm


def capacity_of(tm: TrafficMap) -> list[tuple[int, int | None, str, str | None]]:
    """(weight, reported, source, fallbackReason) of each entry."""
    out = []
    for e in tm.spec.entries:
        assert e.capacity is not None
        out.append((e.weight, e.capacity.reported, e.capacity.source, e.capacity.fallback_reason))
    return out


def fallback(tm: TrafficMap) -> tuple[str, str, str]:
    c = tm.status.condition("CapacityFallback")
    assert c is not None
    return c.status, c.reason, c.message or ""


async def passes(rec: Reconciler, clock: Clock, steps: list[float]) -> None:
    async with aiohttp.ClientSession() as session:
        for step in steps:
            clock.now += step
            result = await rec.run_once(session)
            assert not result.errors, result.errors


UNUSED = "http://127.0.0.1:1"
"""An operator that is never reached (config-only tests)."""
NO_OPERATOR = (2, None, "ControlPlane", "no operator to poll for capacity")


def test_a_service_policy_replaces_the_global_one(tmp_path: Path) -> None:
    """The inline block is polled (its path and method), not the global one; a field it
    leaves out takes its own default, not the global value (quorum 1 here, where the
    global one wants 2 of 2): one fresh report already lowers the allocation."""
    clock = Clock()

    async def body() -> Operator:
        async with Operator(clock, {"/capacity/pool-a": 1, "/deep/pool-a": 3}) as op:
            inline = {"path": "/deep/{provider}", "method": "POST", "periodSeconds": 1}
            inline["timeoutSeconds"] = 0.5
            polling = {**GLOBAL, "samples": 2, "quorum": 2}
            data = config(service("llama-chat", op.url, inline), polling=polling)
            await passes(Reconciler(write(tmp_path, data), clock=clock), clock, [0])
            return op

    op = asyncio.run(body())
    assert op.polls() == [("POST", "/deep/pool-a")]
    tm = the_map(tmp_path)
    assert capacity_of(tm) == [(3, 3, "Endpoint", None), NO_OPERATOR]
    assert fallback(tm)[:2] == ("True", "EndpointCapacityUnavailable")


def test_a_service_policy_polls_with_global_polling_off(tmp_path: Path) -> None:
    """As OME: a service's configured block is a capacity source of its own, whether or
    not `capacityPolling` is enabled."""
    clock = Clock()

    async def body() -> Operator:
        async with Operator(clock, {"/capacity/pool-a": 1}) as op:
            data = config(service("llama-chat", op.url, {}), polling={"enabled": False})
            await passes(Reconciler(write(tmp_path, data), clock=clock), clock, [0])
            return op

    assert asyncio.run(body()).polls() == [("GET", "/capacity/pool-a")]
    assert capacity_of(the_map(tmp_path))[0] == (1, 1, "Endpoint", None)


def test_a_disabled_service_is_not_polled_and_keeps_its_allocation(tmp_path: Path) -> None:
    """`disabled: true`: no capacity request for the service, the control-plane
    allocation stands with no fallback reason, and CapacityFallback says polling is off
    for this service (CapacityPollingDisabled). Another service on the same provider
    is still polled under the global policy."""
    clock = Clock()

    async def body() -> Operator:
        async with Operator(clock, {"/capacity/pool-a": 1}) as op:
            off = service("llama-chat", op.url, {"disabled": True})
            data = config(off, service("llama-code", op.url))
            await passes(Reconciler(write(tmp_path, data), clock=clock), clock, [0, 1.5])
            return op

    op = asyncio.run(body())
    assert op.polls() == [("GET", "/capacity/pool-a")] * 2  # llama-code's, one per pass
    tm = the_map(tmp_path)
    assert capacity_of(tm) == [
        (2, None, "ControlPlane", None),
        (1, None, "ControlPlane", None),
    ]
    status, reason, message = fallback(tm)
    assert (status, reason) == ("False", "CapacityPollingDisabled")
    assert "disabled for this service" in message
    assert capacity_of(the_map(tmp_path, "llama-code"))[0] == (1, 1, "Endpoint", None)


def test_two_policies_on_one_provider_keep_their_own_windows_and_cadence(
    tmp_path: Path,
) -> None:
    """llama-chat on the global policy (every 1 s) and llama-code on its own (every 5 s,
    another path) share pool-a: each policy is polled at its own period and each
    service's figure comes from its own window."""
    clock = Clock()
    slow = {"path": "/deep/{provider}", "periodSeconds": 5, "timeoutSeconds": 1}

    async def body() -> Operator:
        async with Operator(clock, {"/capacity/pool-a": 1, "/deep/pool-a": 3}) as op:
            data = config(service("llama-chat", op.url), service("llama-code", op.url, slow))
            rec = Reconciler(write(tmp_path, data), clock=clock)
            await passes(rec, clock, [0])
            assert sorted(op.polls()) == [("GET", "/capacity/pool-a"), ("GET", "/deep/pool-a")]
            await passes(rec, clock, [1.5, 1.5])  # 3 s in: the slow policy is not due
            assert [p for _, p in op.polls()].count("/deep/pool-a") == 1
            assert [p for _, p in op.polls()].count("/capacity/pool-a") == 3
            await passes(rec, clock, [2.5])  # 5.5 s in: both are
            assert [p for _, p in op.polls()].count("/deep/pool-a") == 2
            return op

    asyncio.run(body())
    assert capacity_of(the_map(tmp_path))[0] == (1, 1, "Endpoint", None)
    assert capacity_of(the_map(tmp_path, "llama-code"))[0] == (3, 3, "Endpoint", None)


def test_equal_policies_share_one_window(tmp_path: Path) -> None:
    """A service whose own block equals the global policy polls the provider once with
    the service on the global policy (same path, cadence and window)."""
    clock = Clock()
    same = {k: v for k, v in GLOBAL.items() if k != "enabled"}

    async def body() -> Operator:
        async with Operator(clock, {"/capacity/pool-a": 1}) as op:
            data = config(service("llama-chat", op.url), service("llama-code", op.url, same))
            await passes(Reconciler(write(tmp_path, data), clock=clock), clock, [0])
            return op

    assert asyncio.run(body()).polls() == [("GET", "/capacity/pool-a")]


def test_a_changed_policy_starts_a_new_window(tmp_path: Path) -> None:
    """Editing a service's block is a new policy: its reports start again from none (the
    old window is dropped), as OME keys capacity state by policy."""
    clock = Clock()

    async def body() -> None:
        async with Operator(clock, {"/capacity/pool-a": 1}) as op:
            data = config(service("llama-chat", op.url, {"samples": 2}))
            path = write(tmp_path, data)
            rec = Reconciler(path, clock=clock)
            await passes(rec, clock, [0])
            assert capacity_of(the_map(tmp_path))[0][1] == 1
            data["services"][0]["routing"]["capacity"] = {
                "samples": 2,
                "quorum": 2,
                "maxAgeSeconds": 30,
            }
            write(tmp_path, data)
            await passes(rec, clock, [0.1])  # a new window: one report of a quorum of 2
            assert capacity_of(the_map(tmp_path))[0][3] == "no quorum: 1 of 2 fresh report(s)"
            await passes(rec, clock, [10])
            assert capacity_of(the_map(tmp_path))[0][1] == 1

    asyncio.run(body())


@pytest.mark.parametrize(
    ("block", "field", "reason"),
    [
        pytest.param(
            {"disabled": True, "periodSeconds": 5},
            "disabled",
            "must not be combined with other capacity fields (periodSeconds)",
            id="disabled with other fields",
        ),
        pytest.param(
            {"periodSeconds": 1},
            "timeoutSeconds",
            "must be shorter than periodSeconds (1) (got 2.0)",
            id="timeout not below period (the default 2 s)",
        ),
        pytest.param(
            {"periodSeconds": 10, "maxAgeSeconds": 5},
            "maxAgeSeconds",
            "must be at least periodSeconds (10)",
            id="maxAge below period",
        ),
        pytest.param(
            {"samples": 3, "quorum": 3, "periodSeconds": 10, "maxAgeSeconds": 25},
            "maxAgeSeconds",
            "must span at least quorum (3) periods of periodSeconds (10)",
            id="maxAge spans fewer than quorum periods",
        ),
        pytest.param(
            {"samples": 2, "quorum": 3, "maxAgeSeconds": 60},
            "quorum",
            "cannot exceed samples (2)",
            id="quorum above samples",
        ),
        pytest.param({"method": "DELETE"}, "method", "Input should be", id="method"),
        pytest.param({"format": "Unavailable"}, "format", "Input should be", id="format"),
        pytest.param({"enabled": True}, "enabled", "Extra inputs", id="no enabled field"),
        pytest.param({"path": "capacity"}, "path", "String should match", id="relative path"),
    ],
)
def test_an_invalid_service_policy_refuses_only_that_service(
    tmp_path: Path, block: dict[str, Any], field: str, reason: str
) -> None:
    """Each error names the service and the field; the service is refused (InvalidOwner,
    no map before its first one) and the others go on."""
    data = config(service("llama-chat", UNUSED, block), service("llama-code", UNUSED))
    loaded = parse(data, "control.yaml", tmp_path)
    assert [s.name for s in loaded.services] == ["llama-code"]
    (refused,) = loaded.refused
    assert f"control.yaml: services[llama-chat].routing.capacity.{field}: {reason}" in (
        refused.message
    )
    result = asyncio.run(Reconciler(write(tmp_path, data), clock=Clock()).run_once())
    outcomes = {r.name: r.outcome for r in result.services}
    assert outcomes["llama-chat"] is PublishOutcome.INVALID_OWNER
    assert outcomes["llama-code"] is PublishOutcome.PUBLISHED


@pytest.mark.parametrize(
    "block",
    [
        pytest.param({}, id="empty: every default"),
        pytest.param({"disabled": False, "periodSeconds": 5}, id="disabled false"),
        pytest.param(
            {"samples": 3, "quorum": 3, "periodSeconds": 10, "maxAgeSeconds": 30},
            id="maxAge exactly quorum periods",
        ),
        pytest.param(
            {
                "samples": 3,
                "quorum": 3,
                "periodSeconds": 0.1,
                "timeoutSeconds": 0.05,
                "maxAgeSeconds": 0.3,
            },
            id="quorum span with decimal seconds",
        ),
    ],
)
def test_valid_service_policies(block: dict[str, Any]) -> None:
    data = config(service("llama-chat", UNUSED, block))
    loaded = parse(data, "control.yaml", Path("."))
    assert not loaded.refused
    got = loaded.services[0].capacity(loaded.config.capacity_polling)
    assert got is not None and got.enabled


def test_a_service_without_a_block_dumps_as_before() -> None:
    """No `capacity` key in the dump of a service that does not use it: its source
    digest, and so its map's sourceGeneration, does not move with this field's arrival."""
    svc = ServiceConfig.model_validate(seed()["services"][0])
    assert "capacity" not in svc.model_dump(mode="json")["routing"]
    with_block = ServiceConfig.model_validate(
        {**seed()["services"][0], "routing": {"capacity": {}}}
    )
    assert "capacity" in with_block.model_dump(mode="json")["routing"]


def test_poll_windows_are_due_by_their_own_period_and_keep_their_samples() -> None:
    """core.capacityreport's window rules: `due` by the policy's period, `kept` the last
    `samples` attempts."""
    assert due(None, 100.0, 10.0)
    assert not due(95.0, 100.0, 10.0)
    assert due(90.0, 100.0, 10.0)
    attempts = [Attempt(CapacityReport(i, 0.0)) for i in range(4)]
    window: tuple[Attempt, ...] = ()
    for attempt in attempts:
        window = kept(window, attempt, 2)
    assert window == tuple(attempts[2:])
