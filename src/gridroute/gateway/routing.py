"""The routing table: what the config means for the request path, as plain data.

Built once per (re)load from the validated config, so a request reads dicts and
tuples, never pydantic models. Candidate order is the front order the core uses for
`first`, fallbacks and the last resort: the local site's providers first, then the
other sites in config order.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridroute.core import Candidate, Policy
from gridroute.gateway.config import GatewayConfig, SiteConfig, TLSConfig


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """How to reach one candidate's backend (compared on reload to keep its pool)."""

    key: str
    site: str
    provider: str
    url: str
    tls: TLSConfig | None
    connect_timeout_s: float
    read_timeout_s: float | None
    max_connections: int
    health_path: str
    local: bool


@dataclass(frozen=True, slots=True)
class Routing:
    """Candidates, per-model policy and backend specs for one config generation."""

    candidates: tuple[Candidate, ...]
    policies: dict[str, Policy]
    """Model name -> pick policy; a model not here is unknown (404)."""
    backends: dict[str, BackendSpec]
    """Candidate key -> backend."""

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.policies)


def _serves(cfg: GatewayConfig, site: SiteConfig) -> frozenset[str]:
    return frozenset(m.name for m in cfg.models if m.sites == "all" or site.name in m.sites)


def build_routing(cfg: GatewayConfig) -> Routing:
    """Turn a validated config into the request path's tables.

    A site that serves none of the configured models gets no candidate (the core
    reads an empty model set as "serves every model", which is not what it means here).
    """
    ordered = sorted(cfg.sites, key=lambda s: 0 if s.name == cfg.local_site else 1)
    candidates: list[Candidate] = []
    backends: dict[str, BackendSpec] = {}
    for site in ordered:
        models = _serves(cfg, site)
        if not models:
            continue
        local = site.name == cfg.local_site
        candidates.append(Candidate(site.name, site.provider_name, models, local))
        timeout = site.connect_timeout_s or (
            cfg.timeouts.local_connect_timeout_s if local else cfg.timeouts.connect_timeout_s
        )
        backends[site.key] = BackendSpec(
            key=site.key,
            site=site.name,
            provider=site.provider_name,
            url=site.backend_url,
            tls=site.tls,
            connect_timeout_s=timeout,
            read_timeout_s=cfg.timeouts.read_timeout_s,
            max_connections=cfg.limits.max_connections_per_site,
            health_path=site.health_path,
            local=local,
        )
    policies = {m.name: m.policy for m in cfg.models}
    return Routing(tuple(candidates), policies, backends)
