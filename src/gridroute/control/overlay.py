"""Rendering the routing overlay from what the control plane knows (pure, no I/O).

The render input (`gridroute overlay render INPUT`, `gridroute control --input INPUT`)
names the providers with their static facts (site, provider, cluster, endpoint,
locality, admission, score, traffic_weight) and each model's routing policy and
picker; drains (`gridroute overlay drain`) override admission per provider. Live
facts come from the operator's signals when the service has them (`Reading`):

    no reading within `stale_after_s`  -> fresh: false (a stale group after the fresh ones)
    ready < 1                          -> excluded (the reference: unready excludes)

`render` sorts and groups with `core.groups.assign_groups`, so the control plane and
the gateway's checks agree by construction, and `next_revision` bumps the revision
only when the rendered overlay's semantic digest changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gridroute.config import load, read_mapping, validate
from gridroute.core.groups import Admission, Locality, Member, RoutingPolicy, assign_groups
from gridroute.core.pickers import MAX_WEIGHT, Picker
from gridroute.wire.overlay import (
    CapabilityRoute,
    Overlay,
    OverlayCandidate,
    SelectionPolicy,
    digest,
)

_NAME = r"^[A-Za-z0-9._-]+$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class ProviderInput(_Frozen):
    """One provider the control plane knows."""

    site: str = Field(min_length=1, pattern=_NAME)
    """Site name. Required."""
    provider: str | None = Field(None, min_length=1, pattern=_NAME)
    """Provider at the site. Default: the site name."""
    cluster: str | None = None
    """Cluster name (a tiebreaker). Default: none."""
    endpoint: str | None = None
    """Endpoint, published for people. Default: none."""
    locality: Locality = Locality.UNKNOWN
    """Locality relative to the consumers of this overlay. Default: unknown."""
    admission_state: Admission = Admission.NEW_AND_EXISTING
    """Admission before drains. Default: new_and_existing."""
    score: float | None = Field(None, allow_inf_nan=False)
    """Static preference, higher better (orders within a group). Default: none."""
    traffic_weight: int | None = Field(None, ge=0, le=MAX_WEIGHT, strict=True)
    """Weight for the weighted picker, 0..1000. Default: none (1)."""
    models: list[str] | Literal["all"] = "all"
    """Models it serves. Default: all the input's models."""

    @property
    def key(self) -> str:
        return f"{self.site}/{self.provider or self.site}"


class ModelInput(_Frozen):
    model: str = Field(min_length=1)
    """Model name. Required."""
    routing_policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
    """geographyFirst (default) or scoreFirst."""
    picker: Picker | None = None
    """Picker the gateways run in the active group. Default: none (deterministic, and
    no selection_policy is published)."""


class SignalsInput(_Frozen):
    """Where the service reads freshness and readiness (an operator's `/signals`)."""

    url: str
    """Operator base URL (`/signals` is appended). Required."""
    poll_interval_s: float = Field(2.0, gt=0)
    """Seconds between polls. Default: 2."""
    stale_after_s: float = Field(30.0, gt=0)
    """A provider without a sample this recent is stale. Default: 30."""


class RenderInput(_Frozen):
    """`gridroute overlay render INPUT`: what the control plane renders from."""

    providers: list[ProviderInput] = Field(min_length=1)
    """Known providers. Required."""
    models: list[ModelInput] = Field(min_length=1)
    """Models to publish. Required."""
    drains: dict[str, Admission] = {}
    """`site/provider` -> admission override (existing_only drains, excluded removes);
    written by `gridroute overlay drain`. Default: none."""
    signals: SignalsInput | None = None
    """Live freshness and readiness (the service only). Default: none (all fresh)."""

    @model_validator(mode="after")
    def _known(self) -> RenderInput:
        keys = [p.key for p in self.providers]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"providers: duplicate site/provider {dup}")
        names = {m.model for m in self.models}
        for i, p in enumerate(self.providers):
            if p.models != "all":
                unknown = [m for m in p.models if m not in names]
                if unknown:
                    raise ValueError(f"providers.{i}.models: unknown models {unknown}")
        for key in self.drains:
            if key not in keys:
                raise ValueError(f"drains: {key!r} is not one of the providers")
        return self


@dataclass(frozen=True, slots=True)
class Reading:
    """What the signals say about one provider now."""

    sampled_at: float | None
    ready: bool


def load_input(path: str | Path) -> RenderInput:
    return load(path, RenderInput)


def render(
    inp: RenderInput,
    revision: int = 0,
    readings: Mapping[str, Reading] | None = None,
    now: float = 0.0,
    generated_by: str | None = "gridroute",
) -> Overlay:
    """The overlay for `inp` (and `readings` at `now`, when the service has signals)."""
    stale_after = inp.signals.stale_after_s if inp.signals is not None else 0.0
    caps = []
    for m in inp.models:
        members = []
        for p in inp.providers:
            if p.models != "all" and m.model not in p.models:
                continue
            admission = inp.drains.get(p.key, p.admission_state)
            fresh = True
            if readings is not None:
                r = readings.get(p.key)
                at = None if r is None else r.sampled_at
                fresh = at is not None and now - at <= stale_after
                if r is not None and not r.ready:
                    admission = Admission.EXCLUDED
            members.append(
                (
                    Member(
                        p.site,
                        p.provider or p.site,
                        p.cluster or "",
                        admission,
                        p.locality,
                        fresh,
                        p.score,
                        p.traffic_weight,
                    ),
                    p,
                )
            )
        extra = {mem.key: p for mem, p in members}
        grouped = assign_groups([mem for mem, _ in members], m.routing_policy)

        def cand(
            mem: Member, group: int | None, extra: dict[str, ProviderInput] = extra
        ) -> OverlayCandidate:
            p = extra[mem.key]
            return OverlayCandidate(
                site=mem.site,
                provider=mem.provider,
                cluster=p.cluster,
                endpoint=p.endpoint,
                selection_group=group,
                admission_state=mem.admission,
                score=mem.score,
                locality=mem.locality,
                fresh=mem.fresh,
                traffic_weight=mem.weight,
            )

        caps.append(
            CapabilityRoute(
                model=m.model,
                routing_policy=m.routing_policy,
                selection_policy=None if m.picker is None else SelectionPolicy(picker=m.picker),
                candidates=[cand(mem, g) for mem, g in grouped.members],
                excluded=[cand(mem, None) for mem in grouped.excluded],
            )
        )
    return Overlay(revision=revision, generated_by=generated_by, models=caps)


def next_revision(previous: Overlay | None, rendered: Overlay) -> Overlay:
    """`rendered` with the revision it should carry: the previous one when nothing
    semantic changed, the previous + 1 when something did."""
    if previous is None:
        return rendered.model_copy(update={"revision": max(rendered.revision, 1)})
    if digest(previous) == digest(rendered):
        return rendered.model_copy(update={"revision": previous.revision})
    return rendered.model_copy(update={"revision": previous.revision + 1})


def with_drain(path: str | Path, key: str, admission: Admission | None) -> dict[str, object]:
    """The input file's mapping with `key`'s drain set (None: the drain lifted),
    validated; the caller writes it back."""
    data = read_mapping(path)
    drains = dict(data.get("drains") or {})
    if admission is None:
        drains.pop(key, None)
    else:
        drains[key] = admission.value
    data["drains"] = drains
    validate(RenderInput, data, str(path))
    return data
