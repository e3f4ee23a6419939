"""What an operator relays: recent samples of its own providers and of each peer's.

Bounded three ways: samples per provider (`samples_per_provider`), their age
(`window_s`, except a provider's newest sample, kept `retain_latest_s` so a
partitioned peer's last readiness stands), and providers per peer site
(`max_peer_providers`, the stalest evicted first). A peer row is keyed by the
responder's stamp, so the same row polled twice is stored once, at the local time
it was first given.

The store never invents rows: an operator started during a partition holds nothing
for the partitioned site until it answers, so readers see that site's candidates
as unmeasured.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping

from gridroute.core.sample import Sample
from gridroute.wire.signals import (
    PEER_MAX_PROVIDERS,
    RELAY_BUDGET_BYTES,
    Cut,
    Encoded,
    Store,
    encode_relay,
)
from gridroute.wire.signals import Received as Received


class RelayStore:
    """Samples by `site/provider`, each history oldest -> newest, plus peers' round ends."""

    def __init__(
        self,
        site: str,
        *,
        samples_per_provider: int = 8,
        window_s: float = 60.0,
        retain_latest_s: float = 3600.0,
        max_peer_providers: int = PEER_MAX_PROVIDERS,
        budget: int = RELAY_BUDGET_BYTES,
        on_cut: Callable[[Mapping[tuple[Store, Cut], int]], None] | None = None,
    ) -> None:
        self.site = site
        self.samples_per_provider = samples_per_provider
        self.window_s = window_s
        self.retain_latest_s = retain_latest_s
        self.max_peer_providers = max_peer_providers
        self.budget = budget
        self._on_cut = on_cut
        """Told what each freshly built body left out (once per body, not per request)."""
        self._histories: dict[tuple[str, str], deque[tuple[int, Sample]]] = {}
        self._round_ends: dict[str, float] = {}
        self.version = 0
        self._cache: dict[tuple[bool, bool], tuple[int, int, Encoded]] = {}

    # --- writing --------------------------------------------------------------------

    def add_local(self, sample: Sample) -> None:
        """Record one of this site's own samples."""
        self._append((sample.site, sample.provider), round(sample.at * 1000), sample)

    def add_peer(self, site: str, received: Iterable[Received]) -> int:
        """Record rows polled from peer `site` (already checked to be about it); new count."""
        added = 0
        for row in received:
            key = (site, row.sample.provider)
            if key not in self._histories and not self._make_room(site):
                continue
            added += self._append(key, row.stamp_ms, row.sample)
        return added

    def round_end(self, site: str, at: float) -> None:
        """A poll round that tried `site` ended at `at` (whatever its result)."""
        self._round_ends[site] = at
        self.version += 1

    def _append(self, key: tuple[str, str], stamp: int, sample: Sample) -> int:
        history = self._histories.get(key)
        if history is None:
            history = self._histories[key] = deque(maxlen=self.samples_per_provider)
        elif history and stamp <= history[-1][0]:
            return 0  # already held (or older than what is held)
        history.append((stamp, sample))
        self.version += 1
        return 1

    def _make_room(self, site: str) -> bool:
        keys = [k for k in self._histories if k[0] == site]
        if len(keys) < self.max_peer_providers:
            return True
        stalest = min(keys, key=lambda k: self._histories[k][-1][1].at)
        del self._histories[stalest]
        return True

    # --- reading --------------------------------------------------------------------

    def prune(self, now: float) -> None:
        """Drop samples outside the window; drop providers whose newest is past retention."""
        horizon = now - self.window_s
        for key in list(self._histories):
            history = self._histories[key]
            if now - history[-1][1].at > self.retain_latest_s:
                del self._histories[key]
                self.version += 1
                continue
            while len(history) > 1 and history[0][1].at < horizon:
                history.popleft()
                self.version += 1

    def histories(self, *, own_only: bool = False) -> list[list[Sample]]:
        """Every provider's samples, oldest -> newest, own site first then by key."""
        keys = sorted(self._histories, key=lambda k: (k[0] != self.site, k))
        return [
            [s for _, s in self._histories[k]] for k in keys if not own_only or k[0] == self.site
        ]

    def latest(self) -> dict[str, Sample]:
        return {f"{k[0]}/{k[1]}": h[-1][1] for k, h in self._histories.items()}

    @property
    def round_ends(self) -> dict[str, float]:
        return dict(self._round_ends)

    def encode(self, now: float, *, own_only: bool = False, latest_only: bool = False) -> Encoded:
        """The /signals body; rebuilt only when rows changed or a second has passed.

        `own_only` is what peers ask for (rows about this site, no round ends: a peer
        would refuse anything else); `latest_only` serves one sample per provider (a
        strictly valid exposition for a Prometheus scrape).
        """
        self.prune(now)
        cached = self._cache.get((own_only, latest_only))
        if cached is not None and cached[0] == self.version and cached[1] == int(now):
            return cached[2]
        histories = self.histories(own_only=own_only)
        if latest_only:
            histories = [h[-1:] for h in histories]
        ends = {} if own_only else self._round_ends
        encoded = encode_relay(histories, ends, local_site=self.site, budget=self.budget)
        self._cache[(own_only, latest_only)] = (self.version, int(now), encoded)
        if encoded.cut and self._on_cut is not None:
            self._on_cut(encoded.cut)
        return encoded
