"""Candidates: the (site, provider) pairs that may serve a model, in config order."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Health(Enum):
    """The gateway's active health verdict on a candidate's backend."""

    UNKNOWN = "unknown"
    """No probe result yet: demotion waits until the first results are in."""
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One provider at one site. Order in the candidate list is the local-first config
    order, which is the "front" used by `first`, fallbacks and the last resort."""

    site: str
    provider: str
    models: frozenset[str] = field(default_factory=frozenset)
    """Models served; empty means every model."""
    local: bool = False
    """The gateway's own site (judged at the last read of its operator, not at poll rounds)."""
    key: str = field(init=False, compare=False)
    """`site/provider`, computed once: the request path reads it per candidate."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.site}/{self.provider}")

    def serves(self, model: str) -> bool:
        return not self.models or model in self.models
