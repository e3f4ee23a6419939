"""What a local grid is made of, and the config files its processes read.

Pure: `GridSpec` says which sites, slots and service times to run, and the functions
here turn it, plus the addresses chosen at start, into the same YAML mappings a user
writes for `gridroute operator` and `gridroute gateway` (camelCase operator keys,
snake_case gateway keys, as their config models define). Keeping this free of
processes lets a test check the generated files against those models directly.

`time_scale` stretches everything that is a duration (service time, scrape and poll
intervals, the availability windows, timeouts) by one factor, so a run can be slowed
down until a small machine keeps up without changing what the routing sees: every
ratio of durations, and so every share and rho, stays the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridroute.core.settings import AvailabilitySettings

PROVIDER = "default"
"""Provider name of every fake site: the simulator's candidate keys are `SITE/default`."""
_MS_FIELDS = ("full_after_ms", "room_after_ms", "lookback_ms", "freshness_window_ms",
              "max_queue_ms", "eject_base_ms", "eject_max_ms")  # fmt: skip
"""Availability windows that stretch with `time_scale` (ceiling half-life does not: it
is minutes long and a demo never reaches it)."""


@dataclass(frozen=True, slots=True)
class LocalSite:
    """One fake site: a model server with `slots` slots and its operator."""

    name: str
    slots: int
    service_scale: float = 1.0
    """Multiplies the grid's service time here (2.0: a site half as fast)."""


def default_sites() -> tuple[LocalSite, ...]:
    """The seed's three sites: hub 128, west 128, east 64 slots."""
    return (LocalSite("hub", 128), LocalSite("west", 128), LocalSite("east", 64))


@dataclass(frozen=True, slots=True)
class GridSpec:
    """Everything that decides how the local grid behaves."""

    sites: tuple[LocalSite, ...] = field(default_factory=default_sites)
    service_s: float = 1.0
    """Mean service time of one request before `time_scale` (the seed uses 0.2 s; the
    demo's default 1 s keeps 320 slots within what Python processes on 2 cores push)."""
    distribution: str = "constant"
    """Service-time distribution of the fake servers: constant, exponential, lognormal."""
    sigma: float = 0.5
    """Lognormal shape."""
    model: str = "fake-model"
    gateway_sites: tuple[str, ...] = ("hub",)
    """Site of each gateway; each polls its own site's operator."""
    policy: str = "gridroute"
    availability: AvailabilitySettings = field(
        default_factory=lambda: AvailabilitySettings(shedding=True)
    )
    interval_s: float = 1.0
    """Scrape interval of the operators, before `time_scale`."""
    poll_interval_s: float | None = None
    """Peer-poll interval of the operators and the gateways' operator poll, before
    `time_scale`; default `interval_s`."""
    stale_metrics_s: float = 2.0
    """How long an operator republishes a failing scrape's last reading. Short, so a
    partitioned site goes silent within seconds rather than the production 10 s."""
    connect_timeout_s: float = 2.0
    gateway_metrics: bool = False
    """Give each gateway a `metrics.listen` port (for a Prometheus to scrape)."""
    time_scale: float = 1.0
    seed: int = 1
    signals: str = "mesh"
    """`mesh` (operators poll each other over mTLS) or `nats` (operators publish to a
    local nats-server, gateways subscribe; docs/signals.md)."""

    def __post_init__(self) -> None:
        names = [s.name for s in self.sites]
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"sites: need distinct names, got {names}")
        if self.signals not in ("mesh", "nats"):
            raise ValueError(f"signals: mesh or nats, got {self.signals!r}")
        unknown = [g for g in self.gateway_sites if g not in names]
        if unknown or not self.gateway_sites:
            raise ValueError(f"gateway_sites: unknown or none: {unknown or '[]'}")

    @property
    def total_slots(self) -> int:
        return sum(s.slots for s in self.sites)

    def service_of(self, site: LocalSite) -> float:
        """Seconds one request holds a slot at `site`, stretched by `time_scale`."""
        return self.service_s * site.service_scale * self.time_scale

    def scaled(self, seconds: float) -> float:
        return seconds * self.time_scale

    @property
    def poll_s(self) -> float:
        """The poll interval, stretched."""
        return self.scaled(
            self.interval_s if self.poll_interval_s is None else self.poll_interval_s
        )


@dataclass(frozen=True, slots=True)
class Addresses:
    """Where everything listens, known once the fake servers announced their URLs."""

    backends: dict[str, str]
    """Site -> fake server base URL."""
    operators: dict[str, int]
    """Site -> operator port (https on 127.0.0.1)."""
    nats: tuple[str, ...] = ()
    """NATS server URLs, with `signals: nats`."""
    nats_tls: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """NATS user (each site, `gateway`) -> the `tls:` block (caFile, certFile, keyFile)
    of its client certificate, which the server maps to that user."""


def fake_server_args(spec: GridSpec, site: LocalSite, index: int) -> list[str]:
    """`gridroute fake-server` arguments for `site` (port 0: it announces its own)."""
    return [
        "fake-server",
        "--port", "0",
        "--slots", str(site.slots),
        "--service-ms", f"{spec.service_of(site) * 1000:g}",
        "--distribution", spec.distribution,
        "--sigma", f"{spec.sigma:g}",
        "--seed", str(spec.seed * 1000 + index),
        "--model", spec.model,
        "--name", site.name,
    ]  # fmt: skip


def operator_url(port: int) -> str:
    return f"https://127.0.0.1:{port}"


def operator_config(
    spec: GridSpec, site: LocalSite, addrs: Addresses, certs: Path
) -> dict[str, Any]:
    """`operator.yaml` of `site`: scrape its fake server, poll every other site (mTLS)."""
    backend = addrs.backends[site.name]
    return {
        "site": site.name,
        "listen": f"127.0.0.1:{addrs.operators[site.name]}",
        "tls": {
            "cert": str(certs / site.name / "server.crt"),
            "key": str(certs / site.name / "server.key"),
            "ca": str(certs / "ca.crt"),
            "clientCert": str(certs / site.name / "client.crt"),
            "clientKey": str(certs / site.name / "client.key"),
        },
        "peers": [
            {"site": peer.name, "url": operator_url(addrs.operators[peer.name])}
            for peer in spec.sites
            if peer.name != site.name and spec.signals == "mesh"
        ],
        "providers": [
            {
                "name": PROVIDER,
                "models": [spec.model],
                "backendUrl": backend,
                "maxRunning": site.slots,
                "metricsConfig": {
                    "endpoint": f"{backend}/metrics",
                    "format": "vllm",
                    "staleMetricsSeconds": spec.scaled(spec.stale_metrics_s),
                },
            }
        ],
        "scrapeIntervalSeconds": spec.scaled(spec.interval_s),
        "peerPollIntervalSeconds": spec.poll_s,
        **_nats_signals(spec, addrs, site.name, camel=True),
    }


def _availability(spec: GridSpec) -> dict[str, Any]:
    data = spec.availability.model_dump(mode="json")
    for name in _MS_FIELDS:
        data[name] = round(data[name] * spec.time_scale)
    return data


def gateway_config(
    spec: GridSpec,
    gateway_site: str,
    addrs: Addresses,
    certs: Path,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """`gateway.yaml` of a gateway at `gateway_site`, polling that site's operator, with
    a metrics listener on `metrics_port` when one is given."""
    interval = spec.poll_s
    extra: dict[str, Any] = (
        {} if metrics_port is None else {"metrics": {"listen": f"127.0.0.1:{metrics_port}"}}
    )
    return {
        **extra,
        "listen": "127.0.0.1:0",
        "local_site": gateway_site,
        "operator": {
            "url": operator_url(addrs.operators[gateway_site]),
            "tls": {
                "ca_file": str(certs / "ca.crt"),
                "cert_file": str(certs / gateway_site / "client.crt"),
                "key_file": str(certs / gateway_site / "client.key"),
            },
            "identity": f"spiffe://gridroute.local/site/{gateway_site}",
            "poll_interval_s": interval,
            "timeout_s": 0.8 * interval,
        },
        "sites": [
            {"name": s.name, "provider": PROVIDER, "backend_url": addrs.backends[s.name]}
            for s in spec.sites
        ],
        "models": [{"name": spec.model, "sites": "all", "policy": spec.policy}],
        "availability": _availability(spec),
        "timeouts": {
            "connect_timeout_s": spec.scaled(spec.connect_timeout_s),
            "read_timeout_s": max(30.0, spec.service_of(max(spec.sites, key=_slow)) * 20),
        },
        "health": {"interval_s": interval, "timeout_s": 0.8 * interval},
        "shutdown_grace_s": 1.0,
        **_nats_signals(spec, addrs, "gateway", camel=False),
    }


def _nats_signals(spec: GridSpec, addrs: Addresses, user: str, camel: bool) -> dict[str, Any]:
    """The `signals:` block of a process under `signals: nats` (nothing on the mesh)."""
    if spec.signals != "nats":
        return {}
    tls = dict(addrs.nats_tls[user])
    if not camel:
        tls = {"ca_file": tls["caFile"], "cert_file": tls["certFile"], "key_file": tls["keyFile"]}
    return {"signals": {"transport": "nats", "nats": {"servers": list(addrs.nats), "tls": tls}}}


def _slow(site: LocalSite) -> float:
    return site.service_scale
