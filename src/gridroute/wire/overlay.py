"""The routing overlay: what the control plane publishes and the gateway routes by.

Version 1 of the schema (docs/overlay.md, JSON Schema in docs/overlay.schema.json).
Every field is additive over a plain ordered candidate list: an overlay without
`selection_group` and `selection_policy` routes as before (deterministic, first viable
in list order). Validation refuses the whole overlay, never a part of it; every
message names the capability (model), the group and the field, e.g.

    overlay.json: models.0.candidates.2.selection_group: capability 'm', group 2:
    selection_group must be contiguous and monotonic (after 0)

The digest is a sha256 over the canonical JSON of everything that routes (not
`revision` nor `generated_by`): two overlays with one digest route identically, which
is what "semantic change" means for the renderer's revision bump and for the
gateway's reload (a same-digest reload is a no-op).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gridroute.config import ConfigError, parse_yaml, validate
from gridroute.core.group_route import Group, ModelGroups, OverlayIndex, Slot
from gridroute.core.groups import Admission, Locality, RoutingPolicy, check_groups
from gridroute.core.pickers import MAX_WEIGHT, Picker

SCHEMA_VERSION = 1
_NAME = r"^[A-Za-z0-9._-]+$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class OverlayCandidate(_Frozen):
    """One provider that may serve the capability."""

    site: str = Field(min_length=1, pattern=_NAME)
    """Site name, as the gateway's `sites[].name`. Required."""
    provider: str = Field(min_length=1, pattern=_NAME)
    """Provider (pool) at that site, as the gateway's `sites[].provider`; the gateway
    routes to its backend for `site/provider` and answers it in `x-grid-provider`.
    Required."""
    cluster: str | None = None
    """The provider's cluster, for people and as the last tiebreaker. Default: none."""
    endpoint: str | None = None
    """Where the provider is reached, for people: the gateway always uses its own
    configured backend URL for `site/provider`. Default: none."""
    selection_group: int | None = Field(None, ge=0)
    """Group number, 0 the best; either every candidate of a capability has one or none
    has (legacy ordered list). Default: none."""
    admission_state: Admission = Admission.NEW_AND_EXISTING
    """`new_and_existing`, or `existing_only` (draining: bound sessions only). Excluded
    providers go in `excluded`. Default: `new_and_existing`."""
    score: float | None = Field(None, allow_inf_nan=False)
    """The control plane's preference, higher better; orders candidates inside a group,
    never splits one, never becomes a traffic share. Default: none (unscored)."""
    locality: Locality = Locality.UNKNOWN
    """`sameSite`, `sameZone`, `sameRegion`, `crossRegion` or `unknown`. Default: unknown."""
    fresh: bool = True
    """The control plane's signals for this provider are current. Default: true."""
    traffic_weight: int | None = Field(None, ge=0, le=MAX_WEIGHT, strict=True)
    """Integer 0..1000 read by the `weighted` picker only: share of new picks within the
    group is weight / sum of the viable members' weights. Missing: 1. Zero: no new picks
    while another member of the group has weight (still a retry target and still serves
    bound sessions); all zero: equal. Anything else (negative, above 1000, fractional,
    a string) refuses the overlay. Default: none (1)."""

    @property
    def key(self) -> str:
        return f"{self.site}/{self.provider}"


class SelectionPolicy(_Frozen):
    """How the gateway picks inside the best viable group."""

    picker: Picker
    """`deterministic`, `roundRobin`, `random`, `weighted` or `saturation`. Required;
    any other value refuses the overlay."""


class CapabilityRoute(_Frozen):
    """One model (capability) and its candidates."""

    model: str = Field(min_length=1)
    """Model name as clients send it in the body's `model`. Required."""
    routing_policy: RoutingPolicy = RoutingPolicy.GEOGRAPHY_FIRST
    """How the control plane sorted and grouped the candidates (`geographyFirst` or
    `scoreFirst`); informative for the gateway. Default: `geographyFirst`."""
    selection_policy: SelectionPolicy | None = None
    """Picker inside the active group. Default: none, which is `deterministic`
    (an upgraded deployment keeps its behaviour)."""
    candidates: list[OverlayCandidate] = []
    """Admitted candidates in published order (group order, best first). Default: []."""
    excluded: list[OverlayCandidate] = []
    """Providers never selected, kept so the model answers 503, not 404. Default: []."""

    @field_validator("excluded", mode="after")
    @classmethod
    def _excluded_state(cls, v: list[OverlayCandidate]) -> list[OverlayCandidate]:
        """An excluded entry that leaves out `admission_state` is `excluded`: read as the
        field's default, the two spellings of one overlay had different digests (so a
        publisher switching between them reloaded every gateway for nothing). A wrong
        explicit value is still refused (`_check_capability`)."""
        return [
            c
            if "admission_state" in c.model_fields_set
            else c.model_copy(update={"admission_state": Admission.EXCLUDED})
            for c in v
        ]

    @property
    def picker(self) -> Picker:
        return (
            Picker.DETERMINISTIC if self.selection_policy is None else self.selection_policy.picker
        )


class Overlay(_Frozen):
    """`gridroute overlay check FILE`: a routing overlay, version 1."""

    version: Literal[1] = 1
    """Schema version. Default: 1."""
    revision: int = Field(0, ge=0)
    """Bumped by the renderer on every semantic change. Default: 0."""
    generated_by: str | None = None
    """Who rendered it (not semantic). Default: none."""
    models: list[CapabilityRoute] = []
    """Capabilities routed by this overlay; other models keep the gateway's `models:`
    routing. Default: []."""

    @model_validator(mode="after")
    def _rules(self) -> Overlay:
        seen: set[str] = set()
        for i, cap in enumerate(self.models):
            where = f"models.{i}"
            if cap.model in seen:
                raise ValueError(f"{where}.model: capability {cap.model!r} appears twice")
            seen.add(cap.model)
            _check_capability(where, cap)
        return self


def _check_capability(where: str, cap: CapabilityRoute) -> None:
    name = cap.model
    for j, c in enumerate(cap.candidates):
        if c.admission_state is Admission.EXCLUDED:
            raise ValueError(
                f"{where}.candidates.{j}.admission_state: capability {name!r}: "
                f"excluded providers belong in `excluded`"
            )
    for j, c in enumerate(cap.excluded):
        if c.admission_state is not Admission.EXCLUDED and "admission_state" in c.model_fields_set:
            raise ValueError(
                f"{where}.excluded.{j}.admission_state: capability {name!r}: "
                f"must be excluded (got {c.admission_state.value})"
            )
    problems = check_groups([(c.selection_group, c.admission_state) for c in cap.candidates])
    if problems:
        p = problems[0]
        group = "" if p.group is None else f", group {p.group}"
        raise ValueError(
            f"{where}.candidates.{p.index}.selection_group: capability {name!r}{group}: {p.message}"
        )
    first: dict[str, tuple[int, OverlayCandidate]] = {}
    for j, c in enumerate(cap.candidates):
        had = first.setdefault(c.key, (j, c))
        if had[1] != c:
            raise ValueError(
                f"{where}.candidates.{j}: capability {name!r}: provider {c.key} appears again "
                f"with conflicting group metadata (see candidates.{had[0]})"
            )
    for j, c in enumerate(cap.excluded):
        if c.key in first:
            raise ValueError(
                f"{where}.excluded.{j}: capability {name!r}: provider {c.key} is both "
                f"a candidate and excluded"
            )
    ungrouped = bool(cap.candidates) and cap.candidates[0].selection_group is None
    if cap.picker is not Picker.DETERMINISTIC and ungrouped:
        # The reference warns and routes ordered-first; a picker that would be silently
        # ignored changes nothing the operator asked for, so it is refused instead.
        raise ValueError(
            f"{where}.selection_policy.picker: capability {name!r}: picker "
            f"{cap.picker.value} needs selection_group on every candidate"
        )


def parse_overlay(text: str | bytes, source: str = "<overlay>") -> Overlay:
    """JSON or YAML text -> a validated overlay, or a `ConfigError` naming the field.

    An empty document is refused, not read as an overlay of no models: a file caught
    mid-write (truncated, then filled) or a publisher's empty answer would otherwise
    swap out the last good overlay, and every overlay-routed model would quietly fall
    back to `models:` routing. An overlay that means "no models" says so
    (`{"version": 1, "models": []}`)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    data = parse_yaml(text, source)
    if not data and not text.strip().startswith("{"):
        raise ConfigError.one(source, "(top level)", "empty overlay (no document)")
    return validate(Overlay, data, source)


def semantic(overlay: Overlay) -> dict[str, Any]:
    """Everything that routes, as plain JSON data."""
    return overlay.model_dump(mode="json", exclude={"revision", "generated_by"})


def digest(overlay: Overlay) -> str:
    """sha256 of the canonical JSON of `semantic(overlay)`, hex."""
    canon = json.dumps(semantic(overlay), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def dumps(overlay: Overlay) -> str:
    """The published form: JSON, fields in schema order, unset defaults left out."""
    return overlay.model_dump_json(indent=1, exclude_none=True) + "\n"


def to_index(overlay: Overlay, overlay_digest: str | None = None) -> OverlayIndex:
    """The request path's frozen tables for an accepted overlay."""
    models: dict[str, ModelGroups] = {}
    for cap in overlay.models:
        excluded = tuple(Slot(c.site, c.provider, c.traffic_weight) for c in cap.excluded)
        grouped = bool(cap.candidates) and cap.candidates[0].selection_group is not None
        groups: list[Group] = []
        if grouped:
            current: list[Slot] = []
            number = 0
            admission = Admission.NEW_AND_EXISTING
            for c in cap.candidates:
                assert c.selection_group is not None
                if current and c.selection_group != number:
                    groups.append(Group(number, admission, tuple(current)))
                    current = []
                number = c.selection_group
                admission = c.admission_state
                current.append(Slot(c.site, c.provider, c.traffic_weight))
            if current:
                groups.append(Group(number, admission, tuple(current)))
        else:
            groups = [
                Group(i, c.admission_state, (Slot(c.site, c.provider, c.traffic_weight),))
                for i, c in enumerate(cap.candidates)
            ]
        picker = cap.picker if grouped else Picker.DETERMINISTIC
        models[cap.model] = ModelGroups(cap.model, picker, tuple(groups), excluded, grouped)
    return OverlayIndex(overlay.revision, overlay_digest or digest(overlay), models)


def json_schema() -> dict[str, object]:
    """The JSON Schema of version 1 (published as docs/overlay.schema.json)."""
    return Overlay.model_json_schema()
