"""The signals path's wall clock: the host's, except that it never steps back."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest

from gridroute import clock
from gridroute.clock import wall
from gridroute.control.overlay_service import OverlayService
from gridroute.gateway.current import CurrentGrid
from gridroute.operator.service import Operator
from gridroute.relay.nats_publisher import NatsPublisher
from gridroute.relay.nats_source import NatsSignalsSource
from gridroute.relay.poller import SignalsClient
from gridroute.relay.prometheus_source import PrometheusSource


@pytest.fixture(autouse=True)
def _clock_state_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that moves `time.time` leaves `wall` where it was after it: the rest of
    the session must not run ahead by a step a test made up."""
    monkeypatch.setattr(clock, "_last", clock._last)


def test_wall_is_the_host_clock_while_it_moves_forward() -> None:
    assert abs(wall() - time.time()) < 0.5


def test_a_step_back_is_absorbed_and_the_clock_rejoins_the_host_once_it_catches_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = time.time
    before = wall()
    host = [real() - 3600.0]  # the host's clock set back an hour
    monkeypatch.setattr(time, "time", lambda: host[0])
    time.sleep(0.01)
    after = wall()
    assert 0.005 < after - before < 5.0, "it went on from where it was, by the time passed"
    host[0] = after + 10.0  # the host's clock is past it again
    assert wall() == host[0], "then it follows the host's clock"


def test_a_step_forward_is_followed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow clock set right, or a VM resumed: stamps other hosts (and Prometheus, with
    `honor_timestamps`) read as absolute times must be true at once."""
    ahead = time.time() + 600.0
    monkeypatch.setattr(time, "time", lambda: ahead)
    assert wall() == ahead


@pytest.mark.parametrize(
    "component",
    [
        Operator,
        SignalsClient,
        NatsSignalsSource,
        NatsPublisher,
        PrometheusSource,
        CurrentGrid,
        OverlayService,
    ],
)
def test_every_component_stamping_signals_reads_the_same_clock(
    component: Callable[..., Any],
) -> None:
    """Samples, the Date a reader re-bases by, and the snapshot that reads them must be on
    one clock: one of them left on `time.time` would put the others apart by a step."""
    assert inspect.signature(component).parameters["clock"].default is wall
