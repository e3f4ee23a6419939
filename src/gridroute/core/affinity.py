"""Session affinity: remember which candidate served a session, for a while.

A session (a header value the client sends, e.g. a conversation id) prefers the
candidate that served it last, so a site's prefix cache keeps paying off. The preference
is only a hint to `decide`: it narrows the choice *within* the tier the pressure rules
chose and never overrides them, so a full or silent site loses its sessions to others
(and the table follows where they went). Bounded in entries (LRU) and in time (TTL);
time is injected like everywhere in core.
"""

from __future__ import annotations

from collections import OrderedDict


class AffinityTable:
    """session -> candidate key, at most `max_entries`, each forgotten after `ttl_s` idle."""

    __slots__ = ("_entries", "max_entries", "ttl_s")

    def __init__(self, max_entries: int = 100_000, ttl_s: float = 600.0) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError("affinity needs max_entries >= 1 and ttl_s > 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, session: str, now: float) -> str | None:
        """The key that last served `session`, unless it idled past the TTL."""
        hit = self._entries.get(session)
        if hit is None:
            return None
        key, seen = hit
        if now - seen > self.ttl_s:
            del self._entries[session]
            return None
        return key

    def put(self, session: str, key: str, now: float) -> None:
        """Record that `key` served `session` now (moves it to the young end)."""
        entries = self._entries
        entries[session] = (key, now)
        entries.move_to_end(session)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
