"""What an operator relays: recent samples of its own providers and of each peer's.

Bounded three ways: samples per provider (`samples_per_provider`), their age
(`window_s`, except a provider's newest sample, kept `retain_latest_s` so a
partitioned peer's last readiness stands), and providers per peer site
(`max_peer_providers`, the stalest evicted first). A peer row is keyed by the
responder's stamp, so the same row polled twice is stored once, at the local time
it was first given.

Deltas: every row appended gets the next number of one sequence, and `cursor()` names
the newest (`<epoch>.<seq>`, the epoch fixed per store, so a restarted operator's
cursors never match an old one). A peer that sends back the cursor of its last poll
(`since=`) gets only rows appended after it: one new sample per provider instead of
the whole window. A cursor from another epoch, or ahead of this store, gets the whole
window, as does a poll without one (the first, and the one after a failed poll).

The store never invents rows: an operator started during a partition holds nothing
for the partitioned site until it answers, so readers see that site's candidates
as unmeasured.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from gridroute.core.sample import Sample
from gridroute.wire.signals import (
    PEER_MAX_PROVIDERS,
    RELAY_BUDGET_BYTES,
    Cut,
    Encoded,
    GatewaySums,
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
        epoch: str | None = None,
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
        self._seqs: dict[tuple[str, str], deque[int]] = {}
        """Sequence number of each held row, parallel to `_histories`."""
        self.seq = 0
        self.epoch = epoch if epoch is not None else f"{time.time_ns():x}"
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
            self._seqs[key] = deque(maxlen=self.samples_per_provider)
        elif history and stamp <= history[-1][0]:
            return 0  # already held (or older than what is held)
        history.append((stamp, sample))
        self.seq += 1
        self._seqs[key].append(self.seq)
        self.version += 1
        return 1

    def _make_room(self, site: str) -> bool:
        keys = [k for k in self._histories if k[0] == site]
        if len(keys) < self.max_peer_providers:
            return True
        stalest = min(keys, key=lambda k: self._histories[k][-1][1].at)
        del self._histories[stalest]
        del self._seqs[stalest]
        return True

    # --- reading --------------------------------------------------------------------

    def prune(self, now: float) -> None:
        """Drop samples outside the window; drop providers whose newest is past retention."""
        horizon = now - self.window_s
        for key in list(self._histories):
            history = self._histories[key]
            if now - history[-1][1].at > self.retain_latest_s:
                del self._histories[key]
                del self._seqs[key]
                self.version += 1
                continue
            while len(history) > 1 and history[0][1].at < horizon:
                history.popleft()
                self._seqs[key].popleft()
                self.version += 1

    def histories(self, *, own_only: bool = False, after: int = 0) -> list[list[Sample]]:
        """Every provider's samples, oldest -> newest, own site first then by key; with
        `after`, only rows appended after that sequence number."""
        keys = sorted(self._histories, key=lambda k: (k[0] != self.site, k))
        out = []
        for k in keys:
            if own_only and k[0] != self.site:
                continue
            rows: list[tuple[int, Sample]] = list(self._histories[k])
            if after:
                rows = [r for r, seq in zip(rows, self._seqs[k], strict=True) if seq > after]
            if rows:
                out.append([s for _, s in rows])
        return out

    def cursor(self) -> str:
        """Names every row held now; a poll that sends it back gets only newer rows."""
        return f"{self.epoch}.{self.seq}"

    def rows_after(self, cursor: str | None) -> int | None:
        """The sequence number a `since=` cursor stands for; None: serve everything."""
        if not cursor:
            return None
        epoch, _, seq = cursor.rpartition(".")
        if epoch != self.epoch or not seq.isdigit() or int(seq) > self.seq:
            return None
        return int(seq)

    def encode_since(
        self, now: float, after: int, *, gateways: Mapping[str, GatewaySums] | None = None
    ) -> Encoded:
        """This site's own rows appended after sequence `after` (what a delta poll gets),
        with its gateways' sums (always whole: they are not rows with a sequence)."""
        self.prune(now)
        histories = self.histories(own_only=True, after=after)
        return encode_relay(
            histories, {}, local_site=self.site, budget=self.budget, gateways=gateways
        )

    def latest(self) -> dict[str, Sample]:
        return {f"{k[0]}/{k[1]}": h[-1][1] for k, h in self._histories.items()}

    @property
    def round_ends(self) -> dict[str, float]:
        return dict(self._round_ends)

    def encode(
        self,
        now: float,
        *,
        own_only: bool = False,
        latest_only: bool = False,
        gateways: Mapping[str, GatewaySums] | None = None,
    ) -> Encoded:
        """The /signals body; rebuilt only when rows changed or a second has passed.

        `own_only` is what peers ask for (rows about this site, no round ends: a peer
        would refuse anything else); `latest_only` serves one sample per provider (a
        strictly valid exposition for a Prometheus scrape).
        """
        self.prune(now)
        cached = self._cache.get((own_only, latest_only))
        if (
            not gateways
            and cached is not None
            and cached[0] == self.version
            and cached[1] == int(now)
        ):
            return cached[2]
        histories = self.histories(own_only=own_only)
        if latest_only:
            histories = [h[-1:] for h in histories]
        ends = {} if own_only else self._round_ends
        encoded = encode_relay(
            histories, ends, local_site=self.site, budget=self.budget, gateways=gateways
        )
        self._cache[(own_only, latest_only)] = (self.version, int(now), encoded)
        if encoded.cut and self._on_cut is not None:
            self._on_cut(encoded.cut)
        return encoded
