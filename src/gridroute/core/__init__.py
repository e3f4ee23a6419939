"""Pure site-selection decisions: no sockets, no asyncio, no wall clock, no global random.

Use::

    state = GridState(candidates, AvailabilitySettings(), models=["m"])
    own = OwnLoad()                                   # this gateway's in-flight per key
    snap = state.refresh(samples, rounds, now, health, own)   # once per poll
    d = decide(snap, "m", rng, Policy.GRIDROUTE, own.counts)  # once per request
    if d.outcome is Outcome.ROUTE:
        own.start(d.view.key, now) ... own.end(d.view.key, later)

`samples` are `Sample`s (one provider at one instant); `rounds[site]` is the time that
site is judged at (a peer: end of the operator's last poll round that tried it; the
local site: the time of this read). Times are seconds on one clock.
"""

from gridroute.core.accounting import AccountingError, OwnLoad
from gridroute.core.affinity import AffinityTable
from gridroute.core.candidate import Candidate, Health
from gridroute.core.gridstate import GridState, Snapshot
from gridroute.core.liveness import Live
from gridroute.core.sample import Sample
from gridroute.core.select import Decision, Outcome, Path, Policy, Reason, decide
from gridroute.core.settings import AvailabilitySettings
from gridroute.core.view import ModelPlan, SiteView

__all__ = [
    "AccountingError",
    "AffinityTable",
    "AvailabilitySettings",
    "Candidate",
    "Decision",
    "GridState",
    "Health",
    "Live",
    "ModelPlan",
    "Outcome",
    "OwnLoad",
    "Path",
    "Policy",
    "Reason",
    "Sample",
    "SiteView",
    "Snapshot",
    "decide",
]
