"""The local grid's generated configs are what the real config models accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridroute.core.settings import AvailabilitySettings
from gridroute.fakeserver.cli import fake_server
from gridroute.gateway.config import GatewayConfig
from gridroute.grid.layout import (
    PROVIDER,
    Addresses,
    GridSpec,
    LocalSite,
    fake_server_args,
    gateway_config,
    operator_config,
)
from gridroute.operator.config import parse_config

CERTS = Path("/certs")
ADDRS = Addresses(
    backends={"hub": "http://127.0.0.1:1001", "west": "http://127.0.0.1:1002",
              "east": "http://127.0.0.1:1003"},
    operators={"hub": 2001, "west": 2002, "east": 2003},
)  # fmt: skip


def test_operator_config_is_a_valid_mtls_ring_member() -> None:
    spec = GridSpec()
    cfg = parse_config(operator_config(spec, spec.sites[2], ADDRS, CERTS), "east")
    assert cfg.site == "east" and cfg.port == 2003
    assert cfg.tls is not None and cfg.tls.client_cert == CERTS / "east" / "client.crt"
    assert {(p.site, p.url) for p in cfg.peers} == {
        ("hub", "https://127.0.0.1:2001"),
        ("west", "https://127.0.0.1:2002"),
    }
    (prov,) = cfg.providers
    assert (prov.name, prov.max_running, prov.backend_url) == (PROVIDER, 64, ADDRS.backends["east"])
    assert prov.metrics_config is not None
    assert prov.metrics_config.endpoint == "http://127.0.0.1:1003/metrics"


def test_gateway_config_polls_its_own_site_and_knows_every_backend() -> None:
    spec = GridSpec(gateway_sites=("west",))
    cfg = GatewayConfig.model_validate(gateway_config(spec, "west", ADDRS, CERTS))
    assert cfg.local_site == "west"
    assert cfg.operator is not None and cfg.operator.url == "https://127.0.0.1:2002"
    assert cfg.operator.identity == "spiffe://gridroute.local/site/west"
    assert [(s.name, s.provider_name, s.backend_url) for s in cfg.sites] == [
        (name, PROVIDER, url) for name, url in ADDRS.backends.items()
    ]
    assert cfg.availability.shedding is True
    assert cfg.listen == "127.0.0.1:0"


def test_time_scale_stretches_every_duration_by_one_factor() -> None:
    base, slow = GridSpec(), GridSpec(time_scale=4.0)
    op0 = parse_config(operator_config(base, base.sites[0], ADDRS, CERTS))
    op4 = parse_config(operator_config(slow, slow.sites[0], ADDRS, CERTS))
    assert op4.scrape_interval_seconds == 4 * op0.scrape_interval_seconds
    assert op4.peer_poll_interval_seconds == 4 * op0.peer_poll_interval_seconds
    gw0 = GatewayConfig.model_validate(gateway_config(base, "hub", ADDRS, CERTS))
    gw4 = GatewayConfig.model_validate(gateway_config(slow, "hub", ADDRS, CERTS))
    assert gw4.availability.full_after_ms == 4 * gw0.availability.full_after_ms
    assert gw4.availability.freshness_window_ms == 4 * gw0.availability.freshness_window_ms
    assert gw4.timeouts.connect_timeout_s == 4 * gw0.timeouts.connect_timeout_s
    assert slow.service_of(slow.sites[0]) == 4 * base.service_of(base.sites[0])
    # what does not measure time stays put
    assert gw4.availability.shed_above_rho == gw0.availability.shed_above_rho


def test_fake_server_args_are_accepted_by_the_cli() -> None:
    spec = GridSpec(service_s=0.25, distribution="lognormal")
    site = LocalSite("west", 7, service_scale=2.0)
    args = fake_server_args(spec, site, 1)
    assert args[0] == "fake-server"
    opts = dict(zip(args[1::2], args[2::2], strict=True))
    assert opts["--slots"] == "7" and opts["--service-ms"] == "500"
    assert opts["--name"] == "west" and opts["--distribution"] == "lognormal"
    # every option the launcher passes is one the command declares
    declared = {f"--{n.replace('_', '-')}" for n in fake_server.__annotations__} - {"--return"}
    assert set(opts) <= declared


def test_a_bad_spec_is_refused_with_the_field() -> None:
    with pytest.raises(ValueError, match="sites"):
        GridSpec(sites=(LocalSite("a", 1), LocalSite("a", 2)))
    with pytest.raises(ValueError, match="gateway_sites"):
        GridSpec(gateway_sites=("nowhere",))


def test_availability_overrides_reach_the_gateway() -> None:
    spec = GridSpec(availability=AvailabilitySettings(shedding=False, max_queue_ms=200))
    cfg = GatewayConfig.model_validate(gateway_config(spec, "hub", ADDRS, CERTS))
    assert cfg.availability.shedding is False
    assert cfg.availability.max_queue_ms == 200


def test_nats_signals_make_publishers_without_peers_and_a_subscribing_gateway() -> None:
    spec = GridSpec(signals="nats")

    def tls(user: str) -> dict[str, str]:
        return {"caFile": "/c/ca.crt", "certFile": f"/c/{user}.crt", "keyFile": f"/c/{user}.key"}

    tls_of = {u: tls(u) for u in ("hub", "west", "east", "gateway")}
    addrs = Addresses(ADDRS.backends, ADDRS.operators, ("tls://127.0.0.1:4222",), tls_of)
    op = parse_config(operator_config(spec, spec.sites[1], addrs, CERTS), "west")
    assert op.peers == [] and op.signals.transport.value == "nats"
    # Each process is identified to the server by its client certificate, not a password.
    assert op.signals.nats is not None and op.signals.nats.user is None
    assert op.signals.nats.tls is not None
    assert op.signals.nats.tls.cert_file == Path("/c/west.crt")
    gw = GatewayConfig.model_validate(gateway_config(spec, "hub", addrs, CERTS))
    assert gw.signals.nats is not None and gw.signals.nats.tls is not None
    assert gw.signals.nats.tls.cert_file == Path("/c/gateway.crt")
    assert gw.signals.nats.servers == ["tls://127.0.0.1:4222"]
    with pytest.raises(ValueError, match="signals: mesh or nats"):
        GridSpec(signals="carrier-pigeon")
