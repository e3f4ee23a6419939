"""The gateway's load report (poll headers) and the gateway sums relayed in /signals."""

from gridroute.core.demand import DemandReport
from gridroute.core.sample import Sample
from gridroute.relay.nats_gateway_reports import GatewayReportBoard
from gridroute.wire.gateway_report import (
    MAX_ENTRIES,
    parse_demand,
    parse_in_flight,
    render_demand,
    render_in_flight,
    valid_gateway_id,
)
from gridroute.wire.promquery import decode_gateway_load
from gridroute.wire.signals import (
    GATEWAY_MAX_TARGETS,
    DropReason,
    GatewaySums,
    decode_relay,
    encode_relay,
)


def test_a_report_round_trips_and_leaves_out_zeros() -> None:
    text = render_in_flight({"hub/pool-a": 12, "west/pool-a": 3, "east/p": 0})
    assert text == "hub/pool-a=12,west/pool-a=3"
    assert parse_in_flight(text) == {"hub/pool-a": 12, "west/pool-a": 3}
    assert parse_in_flight("") == {}


def test_a_report_keeps_the_largest_counts_within_its_bound() -> None:
    counts = {f"s{i}/p": i + 1 for i in range(MAX_ENTRIES + 10)}
    parsed = parse_in_flight(render_in_flight(counts))
    assert parsed is not None and len(parsed) == MAX_ENTRIES
    assert min(parsed.values()) == 11


def test_a_malformed_report_is_ignored_whole() -> None:
    for bad in ("hub/p=1,west", "hub=3", "hub/p=-1", 'hub/p"=1', "hub/p=99999999", "x" * 9000):
        assert parse_in_flight(bad) is None, bad
    assert valid_gateway_id("gw-1-0-abc") and not valid_gateway_id("bad id")
    assert not valid_gateway_id(None)


def _sample(site: str, at: float) -> Sample:
    return Sample(site, "p", at, running=1.0, waiting=0.0, ready=1.0, generation=1)


def test_gateway_sums_round_trip_beside_the_rows() -> None:
    sums = {
        "west": GatewaySums(100.0, 2, {"hub/p": 12.0, "west/p": 3.0}),
        "hub": GatewaySums(100.5, 1, {}),
    }
    enc = encode_relay([[_sample("west", 99.0)]], {}, local_site="west", gateways=sums)
    dec = decode_relay(enc.body, date=101.0, offset=5.0)
    assert dec.dropped == {}
    assert dec.gateways["west"] == GatewaySums(105.0, 2, {"hub/p": 12.0, "west/p": 3.0})
    assert dec.gateways["hub"] == GatewaySums(105.5, 1, {})
    assert len(dec.samples) == 1
    # Every metric family is one group under its TYPE line (a valid exposition).
    lines = enc.body.decode().splitlines()
    types = [ln.split()[2] for ln in lines if ln.startswith("# TYPE")]
    assert len(types) == len(set(types))


def test_a_peer_speaks_only_for_its_own_gateways() -> None:
    sums = {"west": GatewaySums(100.0, 1, {"hub/p": 2.0}), "east": GatewaySums(100.0, 1, {})}
    enc = encode_relay([], {}, local_site="west", gateways=sums)
    dec = decode_relay(enc.body, date=100.0, offset=0.0, expected_site="west")
    assert set(dec.gateways) == {"west"}
    assert dec.dropped[DropReason.SITE_MISMATCH] == 1


def test_gateway_targets_are_capped_per_site() -> None:
    many = {f"s{i}/p": float(i + 1) for i in range(GATEWAY_MAX_TARGETS + 5)}
    enc = encode_relay([], {}, local_site="w", gateways={"w": GatewaySums(1.0, 3, many)})
    dec = decode_relay(enc.body, date=1.0, offset=0.0)
    assert len(dec.gateways["w"].in_flight) == GATEWAY_MAX_TARGETS
    assert min(dec.gateways["w"].in_flight.values()) == 6.0


def test_a_gateway_row_without_its_target_labels_is_refused() -> None:
    body = (
        b'grid_gateway_in_flight{grid_site="w"} 3 1000\n'
        b'grid_gateways_reporting{grid_site="w"} 1.5 1000\n'
    )
    dec = decode_relay(body, date=1.0, offset=0.0)
    assert dec.dropped[DropReason.PARSE] == 2 and dec.gateways == {}


def test_demand_rides_beside_the_in_flight_and_an_old_body_decodes_without_it() -> None:
    """The demand rows (`core/demand.py`) round-trip; a body without them (an older
    operator's) decodes as before, with no demand. An older reader skips them as it
    skips any newer operator's series: shown here with a series this reader does not
    know, which `decode_relay` ignores without counting a drop."""
    sums = {"west": GatewaySums(100.0, 2, {"hub/p": 12.0}, {"hub/p": 7.0}, {"hub/p": 5.0})}
    enc = encode_relay([], {}, local_site="west", gateways=sums)
    body = enc.body.decode()
    assert "grid_gateway_demand{" in body and "grid_gateway_unmet{" in body
    dec = decode_relay(enc.body, date=100.0, offset=0.0)
    assert dec.gateways["west"] == sums["west"] and dec.dropped == {}
    old = "\n".join(ln for ln in body.splitlines() if "demand" not in ln and "unmet" not in ln)
    dec = decode_relay(old.encode() + b"\n", date=100.0, offset=0.0)
    assert dec.gateways["west"] == GatewaySums(100.0, 2, {"hub/p": 12.0})
    newer = body.replace("grid_gateway_demand{", "grid_gateway_future{")
    dec = decode_relay(newer.encode(), date=100.0, offset=0.0)
    assert dec.dropped == {} and dec.gateways["west"].demand == {}


def test_demand_headers_round_trip_and_a_malformed_one_loses_only_the_demand() -> None:
    report = DemandReport({"hub/p": 3}, {"hub/p": 2, "west/p": 1})
    headers = render_demand(report)
    assert headers == {"x-grid-demand": "hub/p=3", "x-grid-unmet": "hub/p=2,west/p=1"}
    assert parse_demand(headers["x-grid-demand"], headers["x-grid-unmet"]) == report
    assert parse_demand(None, None) is None  # an older gateway, or one not following
    assert parse_demand("hub/p=-3", "hub/p=1") is None
    assert render_demand(DemandReport()) == {}


def test_a_nats_report_carries_its_demand_in_message_headers() -> None:
    board = GatewayReportBoard("gridroute.gateways")
    subject = board.subject("west", "gw-1")
    headers = render_demand(DemandReport({"hub/p": 4}, {"hub/p": 4}))
    assert board.ingest(subject, b"hub/p=2", 1.0, headers)
    assert board.ingest(board.subject("west", "gw-2"), b"hub/p=1", 1.0)  # an older one
    (sums,) = board.sums(1.0).values()
    assert sums.gateways == 2 and sums.in_flight == {"hub/p": 3.0}
    assert sums.demand == {"hub/p": 4.0} and sums.unmet == {"hub/p": 4.0}


def test_prometheus_gauges_are_summed_per_gateway_and_an_older_one_demands_its_in_flight() -> None:
    """The third query's answer: two scraped gateways, the first exporting its demand
    gauges, the second (older, or not following demand) only its in-flight."""

    def row(name: str, instance: str, site: str, value: str) -> dict[str, object]:
        labels = {"__name__": name, "job": "gw", "instance": instance}
        return {"metric": {**labels, "site": site, "cluster": "p"}, "value": [1.0, value]}

    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                row("grid_route_site_in_flight", "new:9100", "hub", "3"),
                row("grid_route_site_demand", "new:9100", "hub", "5"),
                row("grid_route_site_unmet", "new:9100", "hub", "4"),
                row("grid_route_site_in_flight", "old:9100", "hub", "2"),
                row("grid_route_site_in_flight", "old:9100", "west", "1"),
                row("grid_route_site_ceiling", "old:9100", "west", "9"),  # not ours
            ],
        },
    }
    (sums,) = decode_gateway_load(answer, "hub", 1.0, max_series=100).values()
    assert sums.gateways == 2
    assert sums.in_flight == {"hub/p": 5.0, "west/p": 1.0}
    assert sums.demand == {"hub/p": 5.0 + 1.0, "west/p": 2.0}  # old: 3 in all, less held
    assert sums.unmet == {"hub/p": 4.0}


def test_want_rides_every_transport_and_an_older_reader_loses_only_it() -> None:
    """`want` (core/demand.py) in the poll headers, the operator's relay, a NATS
    message's headers and the Prometheus gauges; where it is missing the sums have none,
    and `GatewayLoad.site_demand` then splits nothing by it."""
    report = DemandReport({"hub/p": 3}, {"hub/p": 2}, {"hub/p": 2})
    headers = render_demand(report)
    assert headers["x-grid-want"] == "hub/p=2"
    assert parse_demand(headers["x-grid-demand"], headers["x-grid-unmet"], "hub/p=2") == report
    assert parse_demand("hub/p=3", "hub/p=2", "hub/p=x") is None  # malformed: demand lost
    sums = {
        "west": GatewaySums(
            100.0, 2, {"hub/p": 12.0}, {"hub/p": 3.0}, {"hub/p": 2.0}, {"hub/p": 2.0}
        )
    }
    body = encode_relay([], {}, local_site="west", gateways=sums).body
    assert decode_relay(body, date=100.0, offset=0.0).gateways["west"] == sums["west"]
    old = b"\n".join(ln for ln in body.splitlines() if b"want" not in ln) + b"\n"
    assert decode_relay(old, date=100.0, offset=0.0).gateways["west"].want == {}
    board = GatewayReportBoard("gridroute.gateways")
    assert board.ingest(board.subject("west", "gw-1"), b"hub/p=2", 1.0, headers)
    (nats,) = board.sums(1.0).values()
    assert nats.want == {"hub/p": 2.0}
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"__name__": name, "job": "gw", "instance": "a", "site": "hub",
                            "cluster": "p"}, "value": [1.0, value]}
                for name, value in (
                    ("grid_route_site_in_flight", "3"),
                    ("grid_route_site_unmet", "4"),
                    ("grid_route_site_want", "2"),
                )
            ],
        },
    }  # fmt: skip
    (prom,) = decode_gateway_load(answer, "hub", 1.0, max_series=100).values()
    assert prom.want == {"hub/p": 2.0}
