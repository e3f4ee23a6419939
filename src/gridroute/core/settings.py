"""Availability settings: the one source of truth for every selection default.

Field names carry their units (`_ms`, `_s`). The gateway config embeds this model
under `availability`, the simulator's scenarios too, so a default is written once.
Defaults follow the public reference implementation (praxis-proxy Grid,
`AvailabilitySettings::default`) where it has one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AvailabilitySettings(BaseModel):
    """How sites are judged full, silent and learned; how a model sheds."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    shedding: bool = False
    """The one switch: refuse with 429 once every healthy site is full."""
    full_after_ms: int = Field(5000, ge=0)
    """A site must show work waiting at its ceiling this long before it counts as full."""
    room_after_ms: int = Field(2000, ge=0)
    """A shed model routes again once no sample has shown a full site for this long."""
    queue_full: float = Field(1.0, ge=0)
    """Per-endpoint queue depth at which an instant counts as backlogged."""
    shed_above_rho: float = Field(1.05, gt=0)
    """Per-snapshot hysteresis: enter shedding only while every site's rho is above this."""
    route_below_rho: float = Field(0.95, ge=0)
    """Per-snapshot hysteresis: leave shedding as soon as a site's rho is below this."""
    smoothing: float = Field(0.3, gt=0, le=1)
    """EWMA weight of each new sample in the reported rho."""
    ceiling_half_life_ms: int = Field(600_000, gt=0)
    """Learned ceilings decay (soft) or relax (hard) by half per half-life once load falls."""
    ceiling_floor: float = Field(8.0, ge=1)
    """No learned ceiling is ever below this many requests."""
    explore_floor: float = Field(0.25, ge=0, le=1)
    """Every measured capacity weighs at least this fraction of the largest one."""
    kv_full: float = Field(0.8, gt=0, le=1)
    """KV-cache usage that counts as rho 1 (llm-d's per-endpoint kv/0.8)."""
    lookback_ms: int = Field(5000, gt=0)
    """Worst-of window behind a site's newest sample (3 scrapes + 2 s at 1 s scrapes)."""
    freshness_window_ms: int = Field(5000, gt=0)
    """A site that sends nothing new for this long (judged at poll-round ends) is silent."""
    max_queue_ms: int = Field(0, ge=0)
    """Admission queue: hold a request at the gateway up to this long when every site is at
    its ceiling (gridroute policy only). 0 disables the queue."""
    queue_overflow: Literal["forward", "shed"] = "forward"
    """What a request held past `max_queue_ms` does: forward to the overflow tiers or shed."""
    local_accounting: bool = True
    """gridroute policy: correct polled in-flight by this gateway's own sends since the sample."""
    fair_share: bool = True
    """gridroute policy: keep to this gateway's share of each site's free room."""
    fair_share_floor: float = Field(0.05, ge=0, le=1)
    """Smallest share of a site's free room a gateway may claim (so a new gateway is not
    starved by a share measured while it sent nothing)."""
    eject_after_failures: int = Field(5, ge=0)
    """Passive outlier ejection: this many consecutive gateway errors from one candidate
    (connect failed or timed out, connection lost or read timeout before the answer, or a
    502/503/504 answer) demote it for this gateway at once, like Envoy's
    `consecutive_gateway_failure` (default 5). 0 turns ejection off."""
    eject_base_ms: int = Field(5000, gt=0)
    """How long the first ejection lasts; each further one in the same episode (a failure
    right after the last ejection ended, before any success) lasts twice as long. About
    one freshness window, so that by its end signals and health probes have judged a dead
    site themselves."""
    eject_max_ms: int = Field(60_000, gt=0)
    """The longest one ejection lasts, however often the candidate failed."""

    external_load_tau_ms: int = Field(10_000, gt=0)
    """gridroute fair share: time constant of the estimate of load that no gateway sent
    (polled in-flight minus what every gateway reported), which the share leaves out."""

    fair_order: bool = True
    """gridroute policy, with `shedding` on or an admission queue: past capacity, admit in
    fair order (`core/fairness.py`). A request that finds no room, or finds others that
    rank ahead of it waiting, waits up to `fair_wait_ms` (or `max_queue_ms` when set) and
    a freed slot goes to the waiter whose key was served least lately; the ones refused
    are the most served. false: first come takes the slot, the rest get 429 at once."""
    follow_demand: bool = True
    """Past capacity, a gateway's budget at a site follows its share of the demand of the
    gateways that route there (`core/demand.py`): each reports its waiting and refused
    requests per candidate beside its in-flight, and one carrying 40 % of the clients
    holds about 40 % of the slots, not a quarter. false: it reports no demand and its
    budgets follow its holdings only (another gateway reads it as demanding what it
    holds)."""
    fair_wait_ms: int = Field(10_000, gt=0)
    """The longest a request waits for its fair turn past capacity before it is refused
    (when `max_queue_ms` is 0). It waits one turnover of this gateway's slots (in flight
    over admissions per second: about one service time), at most this long: by then
    every slot freed once, so the gateway never queues more than one round."""
    fair_half_life_ms: int = Field(60_000, gt=0)
    """A key's served score halves over this long: the span fairness is judged over."""
    fair_keys: int = Field(65_536, gt=0)
    """Most fairness keys remembered; past it the least recently seen is forgotten (a
    forgotten key ranks as never served)."""
    fair_key_ttl_ms: int = Field(600_000, gt=0)
    """A fairness key not seen for this long is forgotten."""
    retry_after_min_s: int = Field(3, ge=1)
    """Least `Retry-After` seconds on a 429 or 503 the gateway makes itself."""
    retry_after_max_s: int = Field(7, ge=1)
    """Most `Retry-After` seconds (the seed draws 3-7 s; fair order estimates within)."""

    @model_validator(mode="after")
    def _hysteresis_ordered(self) -> AvailabilitySettings:
        if self.route_below_rho > self.shed_above_rho:
            raise ValueError("availability.route_below_rho must be <= availability.shed_above_rho")
        if self.retry_after_min_s > self.retry_after_max_s:
            raise ValueError(
                f"availability.retry_after_min_s ({self.retry_after_min_s}) must be <= "
                f"availability.retry_after_max_s ({self.retry_after_max_s})"
            )
        return self
