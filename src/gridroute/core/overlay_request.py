"""One request routed by the overlay: what the request flow's decide and retry steps ask.

The request flow (`core/flow.py`) is the one flow for every request. For a model the
routing overlay names, its decisions come from here instead of `core/select.decide`:

    first decision   route(table, ...)                    the binding, else the best
                                                          viable group's picker
    a retry          route(table, ..., tried, last)       the next untried member of
                                                          the group, then the next group

Each is turned into the flow's own `Decision` (on the request's snapshot's `SiteView`
of the chosen provider, path `overlay`), with the `GroupDecision` beside it for the
evidence the gateway answers with (`x-grid-group`, `x-grid-step`, ...). Ejected
providers are skipped as if down (`route(avoid=)`); when that leaves nothing, the
choice is made again with them, as a `last_resort`, the flow's rule for every
decision. The overlay never holds a request: its decisions route or refuse (503 when
no group is viable, 404 when the table does not name the model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from random import Random

from gridroute.core.gridstate import Snapshot
from gridroute.core.group_route import GroupDecision, RouteTable, route
from gridroute.core.pickers import PickerStates
from gridroute.core.select import RETRY_AFTER_S, Decision, Outcome, Path

DEFAULT_MAX_ATTEMPTS = 3
"""Attempts per overlay request, the first included (`overlay.max_attempts`)."""

_UNKNOWN = Decision(Outcome.UNKNOWN_MODEL, Path.NONE)


class RoutedDecisions:
    """The flow's `Decision` for each provider on one snapshot, built once per snapshot.

    A frozen dataclass costs microseconds to build (3 us measured, more than the picker
    and the group walk together), and an overlay decision depends only on the provider's
    view in the snapshot, so it is made once and reused until the snapshot changes. One
    per gateway worker (or simulated gateway), beside its picker states.
    """

    __slots__ = ("_by_key", "_on")

    def __init__(self) -> None:
        self._on: Snapshot | None = None
        self._by_key: dict[str, Decision] = {}

    def get(self, snap: Snapshot, key: str) -> Decision | None:
        """The routed decision for `key` on `snap`; None when `snap` has no such view."""
        if snap is not self._on:
            self._on = snap
            self._by_key = {}
        d = self._by_key.get(key)
        if d is None:
            view = snap.view(key)
            if view is None:
                return None
            d = self._by_key[key] = Decision(Outcome.ROUTE, Path.OVERLAY, view)
        return d


@dataclass(frozen=True, slots=True)
class OverlayRequest:
    """The overlay inputs of one request, fixed when it starts (a reload mid-request
    changes nothing for it: the table is the one it started with, retries included)."""

    table: RouteTable
    states: PickerStates
    """Picker positions: process-local, outside every table, advanced by each pick."""
    session: bool = False
    """The request carries a session key."""
    bound: str | None = None
    """The key its session binding names, if it has one."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    routed: RoutedDecisions = field(default_factory=RoutedDecisions)
    """Decisions already made on the current snapshot (shared by a worker's requests)."""

    def decide(
        self,
        snap: Snapshot,
        model: str,
        rng: Random,
        own: Mapping[str, int],
        tried: frozenset[str],
        last: str | None,
        ejected: frozenset[str],
    ) -> tuple[Decision, GroupDecision | None]:
        """The flow's decision for one attempt and the overlay's choice behind it.

        A chosen provider that the snapshot does not know (the gateway's config lost it
        between the overlay's check and now) counts as tried and the choice is made again.
        """
        skip = tried
        path = Path.OVERLAY
        avoid = ejected
        while True:
            g = route(
                self.table,
                model,
                self.states,
                rng,
                session=self.session,
                bound=self.bound,
                tried=skip,
                last=last,
                snapshot=snap,
                own=own,
                avoid=avoid,
            )
            if g is None:
                return _UNKNOWN, None
            slot = g.slot
            if slot is None:
                if avoid:  # nothing but ejected providers left: the last resort
                    avoid, path = frozenset(), Path.LAST_RESORT
                    continue
                wait = RETRY_AFTER_S[int(rng.random() * len(RETRY_AFTER_S))]
                return Decision(Outcome.NO_SITE, Path.NONE, retry_after_s=wait), g
            d = self.routed.get(snap, slot.key)
            if d is None:
                skip = skip | {slot.key}
                continue
            if path is Path.LAST_RESORT:
                d = Decision(Outcome.ROUTE, path, d.view)
            return d, g
