"""The three-site example configs (docs/quickstart.md) are valid and consistent."""

from __future__ import annotations

from pathlib import Path

from gridroute.gateway.config import load_config as load_gateway
from gridroute.operator.config import load_config as load_operator

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "grid"
SITES = ("hub", "west", "east")


def test_every_operator_polls_the_other_two_and_serves_one_vllm() -> None:
    for site in SITES:
        cfg = load_operator(EXAMPLES / f"operator-{site}.yaml", files=False)
        assert cfg.site == site and cfg.tls is not None
        assert sorted(p.site for p in cfg.peers) == sorted(set(SITES) - {site})
        (prov,) = cfg.providers
        assert prov.metrics_config is not None and prov.metrics_config.format.value == "vllm"


def test_the_gateway_routes_to_what_the_operators_publish() -> None:
    gw = load_gateway(EXAMPLES / "gateway-hub.yaml", files=False)
    ops = {s: load_operator(EXAMPLES / f"operator-{s}.yaml", files=False) for s in SITES}
    hub_urls = {p.url for s in ("west", "east") for p in ops[s].peers if p.site == "hub"}
    assert gw.operator is not None and hub_urls == {gw.operator.url}  # the peers' hub
    for site in gw.sites:
        (prov,) = ops[site.name].providers
        assert site.provider_name == prov.name and site.backend_url == prov.backend_url
        assert {m.name for m in gw.models} <= set(prov.models)
