"""`metadata.generation` and the publisher's `observedTrafficMapGeneration` (seed,
"Staleness checks").

The generation counts spec changes: it starts at 1 and moves only when the computed
spec differs from the stored one (a hand edit counts: undoing it is a change too). The
publisher records the generation it last wrote; the two being equal is what "the
publisher has published the latest table" means.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Currency(Enum):
    CURRENT = "Current"
    STALE = "Stale"
    """The publisher last wrote an older generation (or a publish is failing)."""
    NEVER = "Never"
    """Nothing has been published for this map."""


def next_generation(prior: int | None, changed: bool) -> int:
    """The generation after a write: 1 for a new map, +1 on every spec change."""
    if prior is None:
        return 1
    return prior + 1 if changed else prior


@dataclass(frozen=True, slots=True)
class Staleness:
    generation: int
    observed: int | None

    @property
    def currency(self) -> Currency:
        if self.observed is None:
            return Currency.NEVER
        return Currency.CURRENT if self.observed == self.generation else Currency.STALE
