"""Passive outlier ejection on real sockets: a site that keeps failing is set aside after
five consecutive gateway errors, before any health probe or signal says so."""

from __future__ import annotations

from typing import Any

import pytest

from gridroute.core.ejection import Ejections
from tests.gateway.backends import closed_port
from tests.gateway.harness import MODEL, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

CHAT = [{"role": "user", "content": "hello"}]
FIRST = {"models": [{"name": MODEL, "policy": "first"}]}


def value(reg: Any, name: str, **labels: str) -> float:
    got = reg.get_sample_value(name, labels)
    return 0.0 if got is None else got


def test_a_refusing_site_is_ejected_after_five_connect_failures() -> None:
    async def scenario() -> None:
        sites: dict[str, Any] = {"dead": closed_port(), "b": fake("b")}
        async with running_grid(sites, local_site="dead", **FIRST) as g:
            g.feed({"dead": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})  # both measured
            client = g.client()
            for _ in range(8):
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT
                )
                assert raw.headers["x-grid-site"] == "b"
            reg = g.gw.metrics.registry
            # Five tries at the front site, each retried on b; then b directly.
            retried = value(reg, "grid_route_retries_total", site="dead", reason="connect_failed")
            assert retried == 5
            labels = {"site": "dead", "cluster": "dead"}
            assert value(reg, "grid_route_ejections_total", **labels) == 1
            assert value(reg, "grid_route_site_ejected", **labels) == 1
            assert value(reg, "grid_route_decisions_total", site="dead", reason="demoted") == 3
            assert g.in_flight() == 0

    run(scenario)


def test_a_site_answering_503_is_ejected_and_tried_again_after_the_backoff() -> None:
    async def scenario() -> None:
        async with running_grid(
            {"a": fake("a"), "b": fake("b")},
            local_site="a",
            availability={"eject_base_ms": 200},
            **FIRST,
        ) as g:
            g.feed({"a": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})
            g.servers["a"].state.fail(503, None)
            client = g.client()
            for _ in range(7):
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT
                )
                assert raw.headers["x-grid-site"] == "b"
            assert g.servers["a"].state.stats()["failed"] == 5
            # The backoff is driven by the gateway's clock: end it without waiting.
            ej: Ejections = g.gw.current.ejections
            until = ej.until("a/a")
            assert until is not None
            g.servers["a"].state.recover()
            g.gw.current.clock = lambda: until + 0.001
            raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=CHAT)
            assert raw.headers["x-grid-site"] == "a"  # back as the front site
            assert g.in_flight() == 0

    run(scenario)
