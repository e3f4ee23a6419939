"""What a gateway worker reads of the gateways' load from one read's relayed sums
(`gateway/load_report.py`), on every transport."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from gridroute.core import AvailabilitySettings
from gridroute.gateway.load_report import LoadReport
from gridroute.wire.signals import Decoded, GatewaySums


def report(own: dict[str, int]) -> LoadReport:
    state = SimpleNamespace(settings=AvailabilitySettings(follow_demand=False))
    current = cast(Any, SimpleNamespace(own=SimpleNamespace(counts=own), state=state))
    return LoadReport(lambda: current, "gw-me", "hub")


def read(sums: dict[str, GatewaySums]) -> Decoded:
    return Decoded(received=(), round_ends={}, gateways=sums)


def test_the_sums_of_every_reporting_site_are_combined_and_stale_ones_left_out() -> None:
    rep = report({"hub/p": 2})
    rep.take()
    load = rep.load(
        read({
            "hub": GatewaySums(100.0, 2, {"hub/p": 5.0}),
            "west": GatewaySums(99.0, 1, {"hub/p": 1.0}),
            "east": GatewaySums(90.0, 3, {"hub/p": 7.0}),  # older than the 5 s window
        }),
        now=100.5,
    )  # fmt: skip
    assert load is not None
    assert (load.gateways, dict(load.in_flight), dict(load.own)) == (
        3,
        {"hub/p": 6.0},
        {"hub/p": 2},
    )


def test_no_sums_for_the_own_site_keep_the_fallback() -> None:
    assert report({}).load(read({"west": GatewaySums(1.0, 1, {})}), now=1.0) is None


def test_a_reader_no_scrape_carries_adds_itself_to_the_sums() -> None:
    # A Prometheus reader without a metrics listener: the one scraped gateway is
    # another, not this one, so this gateway's own count joins the sums.
    rep = report({"hub/p": 2})
    rep.unscraped = True
    load = rep.load(read({"hub": GatewaySums(10.0, 1, {"hub/p": 6.0})}), now=10.0)
    assert load is not None
    assert (load.gateways, dict(load.in_flight)) == (2, {"hub/p": 8.0})


def test_a_pods_gateway_id_names_the_pod_and_replicas_stay_distinct(monkeypatch) -> None:
    from gridroute.gateway.load_report import POD_NAME_ENV, gateway_id
    from gridroute.wire.gateway_report import valid_gateway_id

    monkeypatch.setenv(POD_NAME_ENV, "west-gridroute-gateway-7d9f8b6c5d-x2k4q")
    ids = {gateway_id(0) for _ in range(50)}
    assert len(ids) == 50 and all(valid_gateway_id(i) for i in ids)
    assert all(i.startswith("gw-west-gridroute-gateway-7d9f8b6c5d-x2k4q-0-") for i in ids)
    monkeypatch.setenv(POD_NAME_ENV, "p" * 80 + "-tail")  # longer than a label: cut
    long_id = gateway_id(3)
    assert valid_gateway_id(long_id) and "p-tail-3-" in long_id and len(long_id) <= 63
    monkeypatch.delenv(POD_NAME_ENV)
    assert valid_gateway_id(gateway_id(1)) and gateway_id(1).startswith("gw-")
