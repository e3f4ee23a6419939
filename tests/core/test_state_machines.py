"""Hypothesis state machines: site liveness and the shed latch, driven by random
sequences of samples, silences and loads, checked against the seed's words."""

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gridroute.core import AvailabilitySettings, Candidate, GridState, Live, Sample

WINDOW_S = 5.0


class LivenessMachine(RuleBasedStateMachine):
    """'A site that has published and then sends nothing for the freshness window is
    silent ... It routes again after two new samples with no full window between them.'"""

    def __init__(self) -> None:
        super().__init__()
        self.state = GridState([Candidate("s", "p")], AvailabilitySettings(), models=["m"])
        self.now = 0.0
        self.samples: list[float] = []
        self.live: Live | None = None
        self.was_silent = False
        self.since_silent: list[float] = []
        self.loaded_ever = False

    def _refresh(self, sample: bool, loaded: bool = True) -> None:
        rows = []
        if sample:
            running = 1.0 if loaded else None
            rows.append(Sample("s", "p", self.now, running=running, waiting=0.0, ready=1.0))
            # Liveness hears samples with load; a site that never published load is
            # heard by its readiness alone (it has no load to go silent from).
            if loaded or not self.loaded_ever:
                self.samples.append(self.now)
                if self.was_silent:
                    self.since_silent.append(self.now)
            self.loaded_ever = self.loaded_ever or loaded
        snap = self.state.refresh(rows, {"s": self.now}, self.now)
        view = snap.views[0]
        self.live = view.live
        if self.live is Live.SILENT:
            self.was_silent = True
            self.since_silent = []

    @rule(dt=st.floats(0.1, 3.0))
    def sample(self, dt: float) -> None:
        self.now += dt
        self._refresh(True)

    @rule(dt=st.floats(0.1, 8.0))
    def quiet(self, dt: float) -> None:
        self.now += dt
        self._refresh(False)

    @rule(dt=st.floats(0.1, 3.0))
    def readiness_only(self, dt: float) -> None:
        """A failed scrape: the operator publishes readiness and no load."""
        self.now += dt
        self._refresh(True, loaded=False)

    @invariant()
    def stale_is_never_live(self) -> None:
        if self.samples and self.now - self.samples[-1] > WINDOW_S:
            assert self.live is not Live.LIVE

    @precondition(lambda self: self.was_silent and self.live is Live.LIVE)
    @invariant()
    def back_only_after_two_samples_within_a_window(self) -> None:
        got = self.since_silent
        assert len(got) >= 2
        assert any(b - a <= WINDOW_S for a, b in itertools.pairwise(got))


class ShedLatch(RuleBasedStateMachine):
    """Shedding enters when every healthy site is full with rho above 1.05, and leaves as
    soon as one is relieved or its rho is below 0.95; in between it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.settings = AvailabilitySettings(shedding=True, full_after_ms=0, room_after_ms=0)
        cands = [Candidate("a", "p"), Candidate("b", "p")]
        self.state = GridState(cands, self.settings, models=["m"])
        self.now = 0.0
        self.shed = False
        self.load = {"a": (0.0, 0.0), "b": (0.0, 0.0)}

    @rule(
        site=st.sampled_from(["a", "b"]),
        running=st.sampled_from([2.0, 8.0, 10.0]),
        waiting=st.sampled_from([0.0, 0.5, 3.0]),
    )
    def set_load(self, site: str, running: float, waiting: float) -> None:
        self.load[site] = (running, waiting)

    @rule()
    def refresh(self) -> None:
        self.now += 1.0
        rows = [
            Sample(site, "p", self.now, running=r, waiting=w, ready=1.0, max_running=10.0)
            for site, (r, w) in self.load.items()
        ]
        before = self.shed
        snap = self.state.refresh(rows, {"a": self.now, "b": self.now}, self.now)
        self.shed = "m" in snap.shedding
        rhos = [v.rho for v in snap.views if v.rho is not None]
        assert len(rhos) == 2
        enter = all(v.full for v in snap.views) and min(rhos) > self.settings.shed_above_rho
        leave = any(v.relieved for v in snap.views) or min(rhos) < self.settings.route_below_rho
        if before:
            assert self.shed == (not leave)
        else:
            assert self.shed == enter


TestLiveness = LivenessMachine.TestCase
TestLiveness.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestShedLatch = ShedLatch.TestCase
TestShedLatch.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
