"""Scenario files: what one simulation run models, validated before anything runs.

A scenario is YAML read into `Scenario` (pydantic v2, `extra="forbid"`), so a typo is
an error rather than a silently ignored key. Every default is written here once and
reproduces the seed PR's partition run: hub 128, west 128 and east 64 slots, 200 ms
constant service, 44.6 s, 64/128/256 clients, 1 s scrapes and polls, and the three
policies side by side. `availability` is the core's own `AvailabilitySettings`, so the
simulator and the gateway read one definition of every selection default.

`overlay` is a routing overlay (docs/overlay.md: the very schema a gateway reads), inline
or a file named relative to the scenario; with one, the overlay's groups and picker
decide every request through the same request flow a gateway runs.

`load_scenario` turns every failure (unreadable file, bad YAML, a field out of range)
into one `ConfigError` (gridroute.config) that names the file, the field and the reason, because the
person reading it is editing that file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

from gridroute.config import load, read_text, validate
from gridroute.core.overlay_request import DEFAULT_MAX_ATTEMPTS
from gridroute.core.prefix import PrefixAffinitySettings
from gridroute.core.select import Policy
from gridroute.core.settings import AvailabilitySettings
from gridroute.sim.sessions import SessionsSpec
from gridroute.wire.overlay import Overlay, parse_overlay

_CONFIG = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
MODEL = "sim-model"
"""The one model every simulated site serves."""
PROVIDER = "default"
"""The one provider at every simulated site (candidate keys are `SITE/default`)."""
_NAME = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class ServiceSpec(BaseModel):
    """How long one request holds a slot. A constant time hides queueing effects that a
    long tail exposes, so the distribution is part of the scenario."""

    model_config = _CONFIG

    distribution: Literal["constant", "exponential", "lognormal"] = "constant"
    """`constant` (the seed run), `exponential` or `lognormal` around `mean_s`."""
    mean_s: float = Field(0.2, gt=0)
    """Mean service time in seconds (200 ms in the seed run)."""
    sigma: float = Field(0.5, gt=0)
    """Lognormal shape (std-dev of the underlying normal); the mean stays `mean_s`."""


class SizeSpec(BaseModel):
    """Request sizes: each request's service time is multiplied by a size drawn with mean 1,
    so long prompts and short ones share the slots (a size of 3 holds a slot 3x as long)."""

    model_config = _CONFIG

    distribution: Literal["constant", "lognormal"] = "lognormal"
    """`lognormal` around 1, or `constant` (every request the same size)."""
    sigma: float = Field(1.0, gt=0)
    """Lognormal shape (std-dev of the underlying normal); the mean stays 1."""


class ExternalStep(BaseModel):
    """From `at_s` on, the site carries `in_flight` requests that no gateway sent."""

    model_config = _CONFIG

    at_s: float = Field(ge=0)
    in_flight: int = Field(ge=0)


class ExternalSpec(BaseModel):
    """Load at a site that did not pass through gridroute (other gateways, batch jobs,
    direct clients): requests that hold slots, queue past full, and show in every scrape,
    but that no gridroute gateway counts as its own. Constant, stepped, or a trace; the
    level in force is the latest of: `in_flight` at 0, each step at its `at_s`, and the
    trace's value for the current `trace_interval_s` (the trace repeats)."""

    model_config = _CONFIG

    in_flight: int = Field(0, ge=0)
    """Constant external in-flight from the start."""
    steps: list[ExternalStep] = Field(default_factory=list)
    """Changes of level at given seconds, in time order."""
    trace: list[int] = Field(default_factory=list)
    """One level per `trace_interval_s`, repeating (overrides `in_flight` and `steps`)."""
    trace_interval_s: float = Field(1.0, gt=0)
    """Seconds each trace value holds."""

    @model_validator(mode="after")
    def _valid(self) -> ExternalSpec:
        times = [st.at_s for st in self.steps]
        if times != sorted(times):
            raise ValueError("steps must be in time order")
        if any(v < 0 for v in self.trace):
            raise ValueError("trace values must be >= 0")
        return self

    def changes(self, until_s: float) -> list[tuple[float, int]]:
        """(time, level) of every change up to `until_s`, starting with the level at 0."""
        if self.trace:
            out: list[tuple[float, int]] = []
            i = 0
            while i * self.trace_interval_s <= until_s:
                out.append((i * self.trace_interval_s, self.trace[i % len(self.trace)]))
                i += 1
            return out
        return [(0.0, self.in_flight), *((st.at_s, st.in_flight) for st in self.steps)]

    def level(self, t: float) -> int:
        """The external in-flight in force at `t`."""
        level = 0
        for at, value in self.changes(t):
            if at <= t:
                level = value
        return level


class ScenarioSite(BaseModel):
    """One site: a pool of slots with a FIFO queue past full."""

    model_config = _CONFIG

    name: str = Field(pattern=_NAME)
    """Site name (lowercase DNS label); the candidate key is `NAME/default`."""
    slots: int = Field(gt=0)
    """Requests the site runs at once (its maxRunning); later arrivals queue."""
    service_scale: float = Field(1.0, gt=0)
    """Multiplies every service time at this site (2.0 = a site half as fast)."""
    service: ServiceSpec | None = None
    """This site's own service-time distribution (default: the scenario's `service`)."""
    external: ExternalSpec | None = None
    """Load at this site from clients that do not pass through gridroute."""
    half_samples: float = Field(0.0, ge=0, le=1)
    """Fraction of this site's scrapes that yield half a sample: running and ready only (no
    queue, no maxRunning, no generation), as a peer or exporter that sends part of a row."""
    link_loss: float = Field(0.0, ge=0, le=1)
    """Fraction of peer polls of this site that are lost (the round still counts as tried)."""
    clock_skew_s: float = 0.0
    """This site's clocks run this far ahead (negative: behind). Readers re-base every row
    by the responder's Date, as the real poller does, so skew should not matter."""
    when_full: Literal["queue", "refuse"] = "queue"
    """What the site does with a request that arrives with every slot busy: `queue` it
    (FIFO, counted as overshoot), or `refuse` it with a 429 at once, as a server with a
    bounded queue or a shedding endpoint picker does (the flow then retries elsewhere:
    under an overlay, in the group, then the next group)."""


class _Timed(BaseModel):
    model_config = _CONFIG

    at_s: float = Field(ge=0)
    """Simulated second at which the event starts."""


class _Spanned(_Timed):
    until_s: float = Field(gt=0)
    """Simulated second at which the event ends (the site returns)."""

    @model_validator(mode="after")
    def _ordered(self) -> _Spanned:
        if self.until_s <= self.at_s:
            raise ValueError(f"until_s ({self.until_s}) must be after at_s ({self.at_s})")
        return self


class PartitionEvent(_Spanned):
    """The site is cut off from every other site: its operator exchanges no polls, and no
    gateway elsewhere reaches its backend (nor its gateways any backend elsewhere)."""

    partition: str
    """The site cut off."""


class FailEvent(_Spanned):
    """The site's backend is down: requests in service there fail, new ones fail after
    the connect timeout, and its operator's scrapes produce nothing."""

    fail: str
    """The site that fails."""


class MetricsDownEvent(_Spanned):
    """The site's metrics endpoint fails while its backend keeps serving: its operator
    publishes readiness only for `stale_metrics_s`, then nothing."""

    metrics_down: str
    """The site whose scrapes fail."""


class RestartEvent(_Timed):
    """The site's operator restarts: the peer rows it learned are lost until it polls
    each peer again."""

    restart_operator: str
    """The site whose operator restarts."""


class ClientsEvent(_Timed):
    """The number of closed-loop clients changes (split across gateways by their shares);
    clients that leave finish their current request first."""

    clients: int = Field(ge=0)
    """The new total number of clients."""


_KINDS = ("partition", "fail", "restart_operator", "clients", "metrics_down")


def _event_kind(value: Any) -> str | None:
    """Which event a mapping is, by the one key that names it."""
    if isinstance(value, dict):
        for kind in _KINDS:
            if kind in value:
                return kind
        return None
    for kind, cls in zip(
        _KINDS,
        (PartitionEvent, FailEvent, RestartEvent, ClientsEvent, MetricsDownEvent),
        strict=True,
    ):
        if isinstance(value, cls):
            return kind
    return None


EventSpec = Annotated[
    Annotated[PartitionEvent, Tag("partition")]
    | Annotated[FailEvent, Tag("fail")]
    | Annotated[RestartEvent, Tag("restart_operator")]
    | Annotated[ClientsEvent, Tag("clients")]
    | Annotated[MetricsDownEvent, Tag("metrics_down")],
    Discriminator(
        _event_kind,
        custom_error_type="event_kind",
        custom_error_message=(
            "an event needs one of: partition, fail, restart_operator, clients, metrics_down"
        ),
    ),
]


def _seed_sites() -> list[ScenarioSite]:
    return [
        ScenarioSite(name="hub", slots=128),
        ScenarioSite(name="west", slots=128),
        ScenarioSite(name="east", slots=64),
    ]


class Scenario(BaseModel):
    """One simulated grid and the load put on it; one result row per policy and clients."""

    model_config = _CONFIG

    name: str = "seed-partition"
    """Label printed above the table."""
    seed: int = 1
    """Seed of every random source (phases, service times, picks): same seed, same rows."""
    duration_s: float = Field(44.6, gt=0)
    """Simulated seconds per row (the seed run's 44.6 s)."""
    warmup_s: float = Field(0.0, ge=0)
    """Seconds at the start that count toward nothing (requests, shares, overshoot)."""
    window_s: float = Field(10.0, gt=0)
    """Width of the sliding window for the peak-window share."""
    service: ServiceSpec = Field(default_factory=ServiceSpec)
    """Service-time distribution shared by every site (scaled per site)."""
    sites: list[ScenarioSite] = Field(default_factory=_seed_sites, min_length=1)
    """Sites in config order; a gateway lists its own site first, then these in order."""
    gateways: int | list[float] = 1
    """Number of gateways sharing the clients equally, or each gateway's client share
    (positive, summing to 1), such as [0.7, 0.1, 0.1, 0.1]."""
    gateway_sites: list[str] | None = None
    """Site of each gateway; default: round-robin over `sites` (gateway 0 at the first)."""
    clients: int | list[int] = Field(default_factory=lambda: [64, 128, 256])
    """Closed-loop clients (each sends its next request when the last ends); a list gives
    one row per value."""
    scrape_interval_s: float = Field(1.0, gt=0)
    """How often each site's operator scrapes its site."""
    poll_interval_s: float = Field(1.0, gt=0)
    """How often operators poll each other, and each gateway polls its operator (unless
    `gateway_poll_interval_s` sets the gateways' own)."""
    gateway_poll_interval_s: float | None = Field(None, gt=0)
    """How often each gateway polls its operator, when it differs from the operators' own
    `poll_interval_s` (default: the same). The seed PR's lab does not state its intervals;
    a rule that acts on a polled ratio herds for as long as a reading stays unchanged, so
    this interval sets how stale the ratio a pick reads can be (docs/simulator.md)."""
    connect_timeout_s: float = Field(2.0, gt=0)
    """How long a request sent to an unreachable or failed backend waits before it fails
    (and is retried once on another site)."""
    policies: list[Policy] = Field(
        default_factory=lambda: [Policy.FIRST, Policy.SATURATION, Policy.GRIDROUTE],
        min_length=1,
    )
    """Selection policies to compare (`first`, `saturation`, `gridroute`)."""
    request_sizes: SizeSpec | None = None
    """Heterogeneous request sizes (multiplying service times); default: all one size."""
    stale_metrics_s: float = Field(10.0, ge=0)
    """How long an operator keeps publishing readiness after its scrapes start failing
    (the operator's `staleMetricsSeconds`)."""
    gateway_reports: bool = True
    """Gateways report their own in-flight on each poll of their operator, and operators
    relay each site's sum, so fair shares are computed among gateways (false: operators
    relay none, and a share is this gateway's part of all polled load)."""
    retry_jitter: bool = False
    """Clients wait a uniform draw between half and all of a 429's Retry-After, as the
    load generator (`gridroute load`) does (false: exactly Retry-After, whole seconds)."""
    availability: AvailabilitySettings = Field(default_factory=AvailabilitySettings)
    """The core's availability settings (shedding, admission queue, windows), as a gateway
    would be configured."""
    events: list[EventSpec] = Field(default_factory=list)
    """Timed disturbances: partition, fail, restart_operator, clients, metrics_down."""
    overlay: Overlay | None = None
    """A routing overlay for `sim-model` (inline, or an overlay file's name relative to
    the scenario): its selection groups and picker decide every request instead of the
    policy, retrying in the group and falling through as a gateway does. Candidates
    name scenario sites, provider `default`. Default: none."""
    sessions: SessionsSpec | None = None
    """Multi-turn conversations with a per-site KV cache (`sim/sessions.py`): each
    client sends the next turn of its conversation, prefill time depends on the tokens
    the site has not cached, and the row reports `prefill_saved` and time to first
    token. Default: none (every request alike)."""
    prefix_affinity: PrefixAffinitySettings = Field(
        default_factory=lambda: PrefixAffinitySettings(enabled=False)
    )
    """The gateways' prefix affinity (the gateway config's `prefix_affinity`); it acts
    only with `sessions` (other requests have no prompt). Default: off here, so a
    scenario without it measures the policy alone."""
    overlay_max_attempts: int = Field(DEFAULT_MAX_ATTEMPTS, ge=1, le=10)
    """Attempts per request under `overlay`, the first included (the gateway's
    `overlay.max_attempts`)."""

    @property
    def client_counts(self) -> list[int]:
        """The client counts, one row each."""
        return [self.clients] if isinstance(self.clients, int) else list(self.clients)

    @property
    def gateway_shares(self) -> list[float]:
        """Each gateway's share of the clients."""
        if isinstance(self.gateways, int):
            return [1.0 / self.gateways] * self.gateways
        return list(self.gateways)

    @property
    def placement(self) -> list[str]:
        """The site each gateway runs at."""
        if self.gateway_sites is not None:
            return list(self.gateway_sites)
        names = [s.name for s in self.sites]
        return [names[i % len(names)] for i in range(len(self.gateway_shares))]

    @property
    def gateway_poll_s(self) -> float:
        """How often each gateway polls its operator."""
        if self.gateway_poll_interval_s is None:
            return self.poll_interval_s
        return self.gateway_poll_interval_s

    @property
    def total_slots(self) -> int:
        return sum(s.slots for s in self.sites)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        names = [s.name for s in self.sites]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"sites: duplicate site name {dupes[0]!r}")
        if self.warmup_s >= self.duration_s:
            raise ValueError(
                f"warmup_s: {self.warmup_s} must be below duration_s ({self.duration_s})"
            )
        if isinstance(self.gateways, int):
            if self.gateways < 1:
                raise ValueError("gateways: need at least 1 gateway")
        else:
            if not self.gateways or any(s <= 0 for s in self.gateways):
                raise ValueError("gateways: shares must be positive (and at least one)")
            if abs(sum(self.gateways) - 1.0) > 1e-6:
                raise ValueError(f"gateways: shares must sum to 1, not {sum(self.gateways):g}")
        if self.gateway_sites is not None:
            if len(self.gateway_sites) != len(self.gateway_shares):
                raise ValueError(
                    f"gateway_sites: {len(self.gateway_sites)} sites for "
                    f"{len(self.gateway_shares)} gateways"
                )
            _known(self.gateway_sites, names, "gateway_sites")
        counts = self.client_counts
        if not counts or any(c < 1 for c in counts):
            raise ValueError("clients: every client count must be at least 1")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError("policies: a policy is listed twice")
        for i, ev in enumerate(self.events):
            site = getattr(ev, "partition", None) or getattr(ev, "fail", None)
            site = site or getattr(ev, "restart_operator", None)
            site = site or getattr(ev, "metrics_down", None)
            if site is not None:
                _known([site], names, f"events.{i}")
        if self.overlay is not None:
            _check_overlay(self.overlay, names)
        return self


def _check_overlay(overlay: Overlay, names: Sequence[str]) -> None:
    """The overlay routes the simulated model over the scenario's sites only."""
    if not any(cap.model == MODEL for cap in overlay.models):
        raise ValueError(f"overlay.models: no entry for the simulated model {MODEL!r}")
    for i, cap in enumerate(overlay.models):
        if cap.model != MODEL:
            raise ValueError(
                f"overlay.models.{i}.model: the simulator serves one model, {MODEL!r} "
                f"(got {cap.model!r})"
            )
        for part in ("candidates", "excluded"):
            for j, c in enumerate(getattr(cap, part)):
                where = f"overlay.models.{i}.{part}.{j}"
                _known([c.site], names, f"{where}.site")
                if c.provider != PROVIDER:
                    raise ValueError(
                        f"{where}.provider: a simulated site has one provider, "
                        f"{PROVIDER!r} (got {c.provider!r})"
                    )


def _known(values: Sequence[str], names: Sequence[str], where: str) -> None:
    for v in values:
        if v not in names:
            raise ValueError(f"{where}: unknown site {v!r} (sites: {', '.join(names)})")


def parse_scenario(data: Any, file: str = "<scenario>") -> Scenario:
    """Validate already-loaded data; problems become one `ConfigError`."""
    return validate(Scenario, {} if data is None else data, file)


def load_scenario(path: str | Path, *, files: bool = True) -> Scenario:
    """Read and validate a scenario file, and the overlay file it names, if any (a
    problem in that file is reported with that file's name and field). Without
    `files`, a named overlay file is not opened: the scenario is validated without
    its overlay (`named_files` says which file was left out)."""

    def named_overlay(data: dict[str, Any]) -> dict[str, Any]:
        name = data.get("overlay")
        if not isinstance(name, str):
            return data
        if not files:
            return {**data, "overlay": None}
        where = Path(path).parent / name
        return {**data, "overlay": parse_overlay(read_text(where, "overlay"), str(where))}

    return load(path, Scenario, named_overlay)


def named_files(data: dict[str, Any]) -> dict[str, str | None]:
    """The file a scenario mapping names, by field, as written: its overlay file
    (relative to the scenario; an inline overlay names none)."""
    name = data.get("overlay")
    return {"overlay": name} if isinstance(name, str) else {}
