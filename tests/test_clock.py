"""The signals path's wall clock: a host clock set back does not move it."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest

from gridroute.clock import wall
from gridroute.control.overlay_service import OverlayService
from gridroute.gateway.current import CurrentGrid
from gridroute.operator.service import Operator
from gridroute.relay.nats_publisher import NatsPublisher
from gridroute.relay.nats_source import NatsSignalsSource
from gridroute.relay.poller import SignalsClient


def test_wall_reads_the_wall_time_and_ignores_a_step_back(monkeypatch: pytest.MonkeyPatch) -> None:
    assert abs(wall() - time.time()) < 1.0, "it is the wall clock"
    before = wall()
    stepped = time.time() - 3600.0
    monkeypatch.setattr(time, "time", lambda: stepped)  # the host's clock set back an hour
    time.sleep(0.01)
    after = wall()
    assert 0.005 < after - before < 5.0, "it went on from where it was, by the time that passed"


@pytest.mark.parametrize(
    "component",
    [Operator, SignalsClient, NatsSignalsSource, NatsPublisher, CurrentGrid, OverlayService],
)
def test_every_component_stamping_signals_reads_the_step_proof_clock(
    component: Callable[..., Any],
) -> None:
    """Samples, the Date a reader re-bases by, and the snapshot that reads them must be on
    one clock; one of them left on `time.time` would put the others an hour apart after
    a step (the Prometheus transport, stamped by Prometheus, is the one exception)."""
    assert inspect.signature(component).parameters["clock"].default is wall
