"""The gateway's choice under a routing overlay: binding, best viable group, picker.

The spike's request sequence, one decision per attempt (the one request flow,
`core/flow.py`, asks for each through `core/overlay_request.py`: its first decision,
then one per retry, with the keys tried so far):

    valid session binding whose provider admission still permits it (and that this
    request has not already tried)?   -> reuse it                    affinity `reused`
    otherwise walk the groups in order; skip a group whose admission is not
    new_and_existing or whose members are all down or already tried; in the first
    viable group:
        first attempt   -> run the group's picker                    step `first`
        a retry         -> the next untried member after the one that failed, in
                           group order (saturation: decide again without it)
                                                                     step `in_group`
        nothing left in the group that failed -> the next viable group  `fell_through`
    no viable group -> no_site (503), also when every candidate is excluded
    (`avoid`, the flow's ejected keys, are skipped like down members without counting
    as tried)

A retry therefore stays in its group while the group has an untried viable member,
and lower groups take no new traffic while a better one is viable. existing_only
members serve bound sessions only; excluded ones never. Inputs are frozen tables
(`OverlayIndex` -> `RouteTable`, rebuilt when the overlay or the gateway's health
verdicts change, never per request); the only mutable input is `PickerStates`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from random import Random

from gridroute.core.gridstate import Snapshot
from gridroute.core.groups import Admission
from gridroute.core.pickers import (
    Picker,
    PickerStates,
    effective_weights,
    pick_index,
    weighted_cycle,
)
from gridroute.core.select import Outcome, Policy, decide


class Affinity(StrEnum):
    """`x-grid-affinity`: what the session binding did (`none`: no session key)."""

    CREATED = "created"
    REUSED = "reused"
    FAILED_OVER = "failed_over"
    NONE = "none"


class Step(StrEnum):
    """Where in the sequence this attempt's choice came from."""

    FIRST = "first"
    BOUND = "bound"
    IN_GROUP = "in_group"
    FELL_THROUGH = "fell_through"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Slot:
    """One published candidate entry (a duplicate entry is a second slot: extra weight)."""

    site: str
    provider: str
    weight: int | None = None
    key: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.site}/{self.provider}")


@dataclass(frozen=True, slots=True)
class Group:
    number: int
    admission: Admission
    slots: tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class ModelGroups:
    """One model (capability) of an accepted overlay."""

    model: str
    picker: Picker
    groups: tuple[Group, ...]
    excluded: tuple[Slot, ...] = ()
    grouped: bool = True
    """False for a legacy overlay without selection_group: every candidate is its own
    group in list order and the picker is deterministic (ordered first-viable)."""


@dataclass(frozen=True, slots=True)
class OverlayIndex:
    """An accepted overlay as the request path reads it."""

    revision: int
    digest: str
    models: Mapping[str, ModelGroups]


@dataclass(frozen=True, slots=True)
class ViableGroup:
    group: Group
    new: tuple[Slot, ...]
    """Members that take new sessions now (admission new_and_existing, not down)."""
    cycle: tuple[int, ...]
    """`weighted_cycle` over `new` (weighted picker only)."""
    outside: frozenset[str]
    """Every key of the model not in `new` (saturation decides with these excluded)."""
    by_key: Mapping[str, int]
    """Index in `new` by key (saturation maps the core's choice back in O(1))."""
    first: Mapping[Affinity, tuple[GroupDecision, ...]]
    """The first-attempt decision for each member and affinity outcome, made once per
    table: a frozen dataclass costs ~2 us to build, more than the picker itself."""


@dataclass(frozen=True, slots=True)
class ModelRoute:
    groups: ModelGroups
    viable: tuple[ViableGroup, ...]
    reuse: Mapping[str, GroupDecision]
    """Keys a bound session may go back to (admitted, new or existing, not down), with
    the decision that reuses each."""


@dataclass(frozen=True, slots=True)
class RouteTable:
    index: OverlayIndex
    models: Mapping[str, ModelRoute]


def build_table(index: OverlayIndex, down: Iterable[str] = ()) -> RouteTable:
    """Join an overlay with the gateway's own verdicts (`down`: keys probed down)."""
    dead = frozenset(down)
    models: dict[str, ModelRoute] = {}
    for name, mg in index.models.items():
        every = frozenset(s.key for g in mg.groups for s in g.slots)
        viable: list[ViableGroup] = []
        reuse: dict[str, GroupDecision] = {}
        picker = mg.picker
        for g in mg.groups:
            if g.admission is Admission.EXCLUDED:
                continue
            alive = tuple(s for s in g.slots if s.key not in dead)
            for s in alive:
                if s.key not in reuse:
                    reuse[s.key] = GroupDecision(s, g.number, picker, Affinity.REUSED, Step.BOUND)
            if g.admission is not Admission.NEW_AND_EXISTING or not alive:
                continue
            cycle: tuple[int, ...] = ()
            if mg.picker is Picker.WEIGHTED:
                cycle = weighted_cycle(effective_weights([s.weight for s in alive]))
            keys = frozenset(s.key for s in alive)
            n = len(alive)
            by_key = {alive[i].key: i for i in range(n - 1, -1, -1)}  # duplicates: the first
            first = {
                a: tuple(GroupDecision(s, g.number, picker, a, Step.FIRST) for s in alive)
                for a in (Affinity.CREATED, Affinity.NONE, Affinity.FAILED_OVER)
            }
            viable.append(ViableGroup(g, alive, cycle, every - keys, by_key, first))
        models[name] = ModelRoute(mg, tuple(viable), reuse)
    return RouteTable(index, models)


@dataclass(frozen=True, slots=True)
class GroupDecision:
    slot: Slot | None
    group: int | None
    picker: Picker
    affinity: Affinity
    step: Step

    @property
    def routed(self) -> bool:
        return self.slot is not None


def _saturation(
    vg: ViableGroup,
    remaining: tuple[Slot, ...],
    snapshot: Snapshot | None,
    model: str,
    rng: Random,
    own: Mapping[str, int] | None,
    tried: frozenset[str],
) -> Slot:
    if snapshot is not None:
        exclude = vg.outside | tried if tried else vg.outside
        d = decide(snapshot, model, rng, Policy.SATURATION, own, exclude=exclude)
        if d.outcome is Outcome.ROUTE and d.view is not None:
            i = vg.by_key.get(d.view.key)
            if i is not None and vg.new[i].key not in tried:
                return vg.new[i]
    return remaining[0]


def _after(remaining: tuple[Slot, ...], group: tuple[Slot, ...], last: str | None) -> Slot:
    """The first of `remaining` after `last` in group order, wrapping around."""
    if last is not None:
        pos = next((i for i, s in enumerate(group) if s.key == last), -1)
        if pos >= 0:
            n = len(group)
            keys = {s.key for s in remaining}
            for k in range(1, n + 1):
                s = group[(pos + k) % n]
                if s.key in keys:
                    return s
    return remaining[0]


def route(
    table: RouteTable,
    model: str,
    states: PickerStates,
    rng: Random,
    *,
    session: bool = False,
    bound: str | None = None,
    tried: frozenset[str] = frozenset(),
    last: str | None = None,
    snapshot: Snapshot | None = None,
    own: Mapping[str, int] | None = None,
    avoid: frozenset[str] = frozenset(),
) -> GroupDecision | None:
    """Choose for one attempt; None when the overlay does not route `model`.

    `session`: the request carries a session key; `bound`: the key its binding names;
    `tried`: keys this request already attempted, `last` the one that just failed;
    `avoid`: keys skipped as if down without having been tried (the flow's ejected
    ones), so a group of only avoided members is passed over and the step stays
    `first` on a first attempt. `snapshot` and `own` feed the saturation picker.
    """
    mr = table.models.get(model)
    if mr is None:
        return None
    picker = mr.groups.picker
    affinity = Affinity.CREATED if session else Affinity.NONE
    skip = tried | avoid if avoid else tried
    if bound is not None:
        if bound not in skip:
            reused = mr.reuse.get(bound)
            if reused is not None:
                return reused
        affinity = Affinity.FAILED_OVER
    failed_group = None
    if last is not None:
        for vg in mr.viable:
            if any(s.key == last for s in vg.group.slots):
                failed_group = vg.group.number
                break
    if not skip:  # the first attempt: the best viable group's picker
        for vg in mr.viable:
            if picker is Picker.SATURATION:
                slot = _saturation(vg, vg.new, snapshot, model, rng, own, tried)
                return vg.first[affinity][vg.by_key[slot.key]]
            n = len(vg.new)
            i = pick_index(picker, n, vg.cycle, states, model, vg.group.number, rng)
            return vg.first[affinity][i]
    for vg in mr.viable:
        remaining = tuple(s for s in vg.new if s.key not in skip)
        if not remaining:
            continue
        number = vg.group.number
        if picker is Picker.SATURATION:
            slot = _saturation(vg, remaining, snapshot, model, rng, own, skip)
        elif number == failed_group:
            slot = _after(remaining, vg.new, last)
        else:
            # The weighted cycle indexes `new`; with some members tried it does not apply.
            cycle = vg.cycle if len(remaining) == len(vg.new) else ()
            slot = remaining[pick_index(picker, len(remaining), cycle, states, model, number, rng)]
        if number == failed_group:
            step = Step.IN_GROUP
        else:
            step = Step.FELL_THROUGH if tried else Step.FIRST
        return GroupDecision(slot, number, picker, affinity, step)
    return GroupDecision(None, None, picker, affinity, Step.NONE)
