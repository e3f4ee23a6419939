"""Pickers: how the gateway chooses inside the best viable selection group.

    deterministic  the group's first viable member (the historical first-viable rule)
    roundRobin     members in group order, one after another: A, B, C, A, B, C, ...
    random         uniform over the viable members, from the injected rng
    weighted       weighted round robin over `traffic_weight`: in every cycle of
                   sum(weights) / gcd(weights) picks each member is chosen exactly
                   weight / gcd times, its turns spread evenly (stride scheduling)
    saturation     the core's site selection (`core.select.decide`, policy
                   `saturation`) among the group's viable members (in group_route)

State is process-local, as the spike asks (no fleet-wide counter), and lives in
`PickerStates`, outside every snapshot: one turn counter per (model, group number).
So republishing an overlay, identical or not, resets nothing, and a provider that
leaves one group and comes back leaves every other group's position where it was.
A pick is O(1) for every picker but saturation: the weighted cycle is built once per
snapshot, never per request.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from random import Random


class Picker(StrEnum):
    """`selection_policy.picker` values; an omitted policy is deterministic."""

    DETERMINISTIC = "deterministic"
    ROUND_ROBIN = "roundRobin"
    RANDOM = "random"
    WEIGHTED = "weighted"
    SATURATION = "saturation"


MAX_WEIGHT = 1000
"""Largest traffic_weight (the reference's capacityWeight range is 1..=1000)."""
DEFAULT_WEIGHT = 1
"""A missing traffic_weight: an equal share."""


def effective_weights(weights: Sequence[int | None]) -> tuple[int, ...]:
    """Missing weights count `DEFAULT_WEIGHT`; if every weight is 0, all count 1 (a group
    whose every member asks for no traffic still has to serve the group's traffic)."""
    out = tuple(DEFAULT_WEIGHT if w is None else w for w in weights)
    if out and not any(out):
        return tuple(1 for _ in out)
    return out


def weighted_cycle(weights: Sequence[int]) -> tuple[int, ...]:
    """One cycle of the weighted picker: member indices, member i `weights[i] / g` times.

    Turn j (0-based) of member i sits at (2j + 1) / (2 w_i), the middle of its j-th
    share of the cycle; sorting those positions (ties: lower index first) spreads each
    member's turns evenly, like smooth weighted round robin, and counts are exact by
    construction. Weights are integers <= MAX_WEIGHT, so positions are distinct
    rationals with small denominators and floats order them exactly.
    """
    g = 0
    for w in weights:
        if w < 0:
            raise ValueError(f"negative weight {w}")
        g = math.gcd(g, w)
    if g == 0:
        return ()
    slots = [
        ((2 * j + 1) / (2 * (w // g)), i) for i, w in enumerate(weights) for j in range(w // g)
    ]
    slots.sort()
    return tuple(i for _, i in slots)


class PickerStates:
    """Turn counters per (model, group number), bounded (least recently used dropped)."""

    __slots__ = ("_turns", "max_entries")

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._turns: dict[tuple[str, int], int] = {}

    def turn(self, model: str, group: int) -> int:
        """This group's next turn number (0, 1, 2, ...); advances the counter."""
        key = (model, group)
        turns = self._turns
        t = turns.pop(key, 0)
        turns[key] = t + 1  # re-inserted: the dict's order is recency
        if len(turns) > self.max_entries:
            del turns[next(iter(turns))]
        return t

    def peek(self, model: str, group: int) -> int:
        return self._turns.get((model, group), 0)

    def __len__(self) -> int:
        return len(self._turns)


def pick_index(
    picker: Picker,
    n: int,
    cycle: Sequence[int],
    states: PickerStates,
    model: str,
    group: int,
    rng: Random,
) -> int:
    """Index of the chosen member among `n` viable ones (saturation is not handled here).

    `cycle` is `weighted_cycle` of the viable members' weights (weighted only).
    """
    if picker is Picker.ROUND_ROBIN:
        return states.turn(model, group) % n
    if picker is Picker.RANDOM:
        return int(rng.random() * n)
    if picker is Picker.WEIGHTED and cycle:
        return cycle[states.turn(model, group) % len(cycle)]
    return 0
