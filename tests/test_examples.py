"""The example configs the README walks through are valid and agree with each other."""

from pathlib import Path

import yaml

from gridroute.gateway.config import load_config
from gridroute.operator.config import load_config as load_operator_config

ROOT = Path(__file__).resolve().parent.parent / "examples"


def test_local_three_site_examples_are_valid_and_consistent() -> None:
    gw = load_config(ROOT / "gateway.yaml", files=False)
    ops = {
        s: load_operator_config(ROOT / f"operator-{s}.yaml", files=False)
        for s in ("hub", "west", "east")
    }
    assert gw.local_site == "hub"
    assert gw.operator is not None
    hub = ops["hub"]
    assert gw.operator.url.endswith(":" + hub.listen.rsplit(":", 1)[1])
    for site in gw.sites:
        op = ops[site.name]
        providers = {p.name: p for p in op.providers}
        assert site.provider in providers, site
        assert str(providers[site.provider].backend_url).rstrip("/") == site.backend_url
        for model in gw.models:
            assert model.name in providers[site.provider].models
    # every operator polls the other two
    for name, op in ops.items():
        assert {p.site for p in op.peers} == set(ops) - {name}


def test_scenario_examples_parse() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        assert isinstance(yaml.safe_load(path.read_text()), dict), path
