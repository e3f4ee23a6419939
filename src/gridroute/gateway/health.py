"""Active health probes of every backend: up after `rise` passes, down after `fall` failures.

A backend starts `UNKNOWN`, which the core never demotes, so a gateway that just
started does not push every request to a last resort before it has probed anything.
Verdicts go to the live grid at once (`CurrentGrid.set_health`), not at the next poll:
demotion of a dead backend should not wait for the operator.

A probe is a GET of the backend's `health_path` through its own pool (same TLS, so a
mutual-TLS backend is probed over mutual TLS). Any answer below 500 passes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gridroute.core import Health
from gridroute.gateway.backends import Backend, Backends
from gridroute.gateway.config import HealthConfig
from gridroute.gateway.current import CurrentGrid
from gridroute.gateway.upstream import UpstreamError

log = logging.getLogger("gridroute.gateway")


@dataclass(slots=True)
class _Track:
    verdict: Health = Health.UNKNOWN
    passes: int = 0
    fails: int = 0
    last_error: str | None = None


def step(track: _Track, ok: bool, rise: int, fall: int) -> Health:
    """Fold one probe result in; returns the (possibly new) verdict."""
    if ok:
        track.passes += 1
        track.fails = 0
        if track.passes >= rise:
            track.verdict = Health.UP
    else:
        track.fails += 1
        track.passes = 0
        if track.fails >= fall:
            track.verdict = Health.DOWN
    return track.verdict


class HealthProber:
    """Probes every backend each `interval_s`, all at once; counts completed rounds."""

    def __init__(
        self, cfg: HealthConfig, backends: Backends, current: Callable[[], CurrentGrid]
    ) -> None:
        self.cfg = cfg
        self.backends = backends
        self._current = current
        self.tracks: dict[str, _Track] = {}
        self.rounds = 0

    async def _probe(self, backend: Backend) -> tuple[bool, str | None]:
        pool = backend.pool
        resp = None
        try:
            async with asyncio.timeout(self.cfg.timeout_s):
                resp = await pool.request("GET", backend.spec.health_path, [], b"", over_limit=True)
                while await resp.readany():
                    pass
            if resp.status < 500:
                return True, None
            return False, f"HTTP {resp.status}"
        except (UpstreamError, TimeoutError) as exc:
            return False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            if resp is not None:
                resp.release()

    async def probe_round(self) -> None:
        """Probe every backend once and publish the verdicts."""
        backends = dict(self.backends.by_key)
        results = await asyncio.gather(*(self._probe(b) for b in backends.values()))
        self.tracks = {k: t for k, t in self.tracks.items() if k in backends}
        for key, (ok, error) in zip(backends, results, strict=True):
            track = self.tracks.setdefault(key, _Track())
            before = track.verdict
            track.last_error = error
            after = step(track, ok, self.cfg.rise, self.cfg.fall)
            if after is not before:
                log.warning(
                    "backend %s: %s -> %s%s",
                    key,
                    before.value,
                    after.value,
                    f" ({error})" if error else "",
                    extra={"event": "health_transition", "key": key, "to": after.value},
                )
        self.rounds += 1
        self._current().set_health({k: t.verdict for k, t in self.tracks.items()})

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.probe_round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("health: a probe round failed")
            await asyncio.sleep(max(0.0, self.cfg.interval_s - (loop.time() - started)))
