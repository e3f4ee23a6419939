"""What an operator keeps of its gateways' reports and relays of its peers' sums."""

from gridroute.operator.gateway_reports import MAX_GATEWAYS, GatewayReports
from gridroute.wire.signals import GatewaySums


def test_reports_are_summed_per_candidate_and_expire_after_the_window() -> None:
    r = GatewayReports("hub", window_s=5.0)
    r.record("gw-1", {"hub/p": 3, "west/p": 1}, 10.0)
    r.record("gw-2", {"hub/p": 2}, 12.0)
    # Neither reports demand: each demands its whole in-flight where it holds any
    # (gw-1: 4 in all, so 1 beyond its 3 at hub and 3 beyond its 1 at west).
    assert r.own(13.0) == GatewaySums(
        13.0, 2, {"hub/p": 5.0, "west/p": 1.0}, {"hub/p": 1.0, "west/p": 3.0}
    )
    r.record("gw-1", {"west/p": 4}, 13.0)  # a newer report replaces the older one
    assert r.own(13.5).in_flight == {"hub/p": 2.0, "west/p": 4.0}
    assert r.own(17.5) == GatewaySums(17.5, 1, {"west/p": 4.0})  # nothing held elsewhere
    assert r.own(30.0).gateways == 0


def test_peers_sums_are_relayed_until_stale_and_sites_without_gateways_are_left_out() -> None:
    r = GatewayReports("hub", window_s=5.0)
    r.peer("west", GatewaySums(10.0, 2, {"hub/p": 7.0}))
    r.peer("east", GatewaySums(10.0, 0, {}))
    assert r.rows(11.0) == {"west": GatewaySums(10.0, 2, {"hub/p": 7.0})}
    assert r.rows(11.0, own_only=True) == {}
    r.record("gw", {"hub/p": 1}, 11.0)
    assert set(r.rows(11.0)) == {"hub", "west"}
    assert set(r.rows(16.0)) == {"hub"}
    r.peer("west", None)
    assert set(r.rows(11.0)) == {"hub"}


def test_the_number_of_gateways_remembered_is_bounded() -> None:
    r = GatewayReports("hub")
    for i in range(MAX_GATEWAYS + 3):
        r.record(f"gw-{i}", {"hub/p": 1}, float(i) / 1000)
    assert r.own(1.0).gateways == MAX_GATEWAYS
