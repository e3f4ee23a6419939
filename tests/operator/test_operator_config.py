"""operator.yaml: defaults, the environment override, and errors that name the field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from gridroute.config import ConfigError
from gridroute.operator.config import SCRAPE_INTERVAL_ENV, load_config, parse_config

EXAMPLES = Path(__file__).parents[2] / "examples"


def minimal(**extra: object) -> dict[str, object]:
    return {"site": "west", **extra}


def test_defaults() -> None:
    cfg = parse_config(minimal())
    assert cfg.scrape_interval_seconds == 1.0 and cfg.peer_poll_interval_seconds == 1.0
    assert cfg.scrape_timeout_s < cfg.scrape_interval_seconds
    assert cfg.peer_timeout_s < cfg.peer_poll_interval_seconds


def test_environment_overrides_scrape_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SCRAPE_INTERVAL_ENV, "5")
    assert parse_config(minimal(scrapeIntervalSeconds=2)).scrape_interval_seconds == 5.0
    monkeypatch.setenv(SCRAPE_INTERVAL_ENV, "soon")
    with pytest.raises(ConfigError, match=SCRAPE_INTERVAL_ENV):
        parse_config(minimal())


def pooled(**metrics: object) -> dict[str, object]:
    return {
        "name": "p",
        "models": ["m"],
        "backendUrl": "http://x",
        "metricsConfig": {"endpoint": "http://epp:9090/metrics", **metrics},
    }


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (minimal(scrapeTimeoutSeconds=2), "scrapeTimeoutSeconds"),
        (minimal(peerPollTimeoutSeconds=1), "peerPollTimeoutSeconds"),
        (minimal(site="bad site"), "site"),
        (
            minimal(providers=[{"name": "p", "models": ["m"], "backendUrl": "ftp://x"}]),
            "providers.0.backendUrl",
        ),
        (
            minimal(
                providers=[
                    {
                        "name": "p",
                        "models": ["m"],
                        "backendUrl": "http://x",
                        "metricsConfig": {"endpoint": "http://x/metrics", "format": "tgi"},
                    }
                ]
            ),
            "providers.0.metricsConfig.format",
        ),
        (minimal(providers=[pooled(poolName="")]), "providers.0.metricsConfig.poolName"),
        (minimal(providers=[pooled(poolName="Qwen_3")]), "providers.0.metricsConfig.poolName"),
        (
            minimal(providers=[pooled(poolName="qwen3", format="vllm")]),
            "providers.0.metricsConfig.poolName",
        ),
        (minimal(peers=[{"site": "west", "url": "https://x"}]), "peers"),
        (minimal(surprise=1), "surprise"),
        (minimal(listen="nowhere"), "listen"),
    ],
)
def test_errors_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, "op.yaml")
    assert "op.yaml" in str(caught.value) and field in str(caught.value)


def test_generation_is_stable_and_changes_with_the_provider() -> None:
    base = {"name": "p", "models": ["m"], "backendUrl": "http://x", "maxRunning": 8}
    one = parse_config(minimal(providers=[base])).providers[0]
    same = parse_config(minimal(providers=[base])).providers[0]
    edited = parse_config(minimal(providers=[{**base, "maxRunning": 16}])).providers[0]
    pinned = parse_config(minimal(providers=[{**base, "generation": 3}])).providers[0]
    assert one.config_generation() == same.config_generation()
    assert one.config_generation() != edited.config_generation()
    assert pinned.config_generation() == 3


def test_pool_name_is_optional_and_scopes_the_generation() -> None:
    """`poolName` defaults to unset (every series on the page counts); naming a pool, or
    another one, is a new generation, while leaving it unset keeps the digest it had
    before the field existed."""
    unset = parse_config(minimal(providers=[pooled(format="epp")])).providers[0]
    assert unset.metrics_config is not None and unset.metrics_config.pool_name is None
    settings = unset.model_dump(mode="json", exclude={"generation"})
    del settings["metrics_config"]["pool_name"]
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).digest()
    assert unset.config_generation() == int.from_bytes(digest[:6], "big")
    qwen = parse_config(minimal(providers=[pooled(poolName="qwen3")])).providers[0]
    llama = parse_config(minimal(providers=[pooled(pool_name="llama")])).providers[0]
    assert qwen.metrics_config is not None and qwen.metrics_config.pool_name == "qwen3"
    assert (
        len({unset.config_generation(), qwen.config_generation(), llama.config_generation()}) == 3
    )
    epp = parse_config(minimal(providers=[pooled(poolName="qwen3", format="epp")]))
    assert epp.providers[0].metrics_config is not None


def test_example_configs_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SCRAPE_INTERVAL_ENV, raising=False)
    files = sorted(EXAMPLES.glob("operator-*.yaml"))
    assert files
    for path in files:
        cfg = load_config(path, files=False)
        assert cfg.site in path.name
        yaml.safe_load(path.read_text())
