"""The `/signals` relay payload: samples of every site as timestamped Prometheus text.

One poll of an operator's `/signals` is how every site's load reaches a gateway and
a peer operator, so the format is the contract between processes. It is the
Prometheus text format (Prometheus can scrape it too), one line per field of a
`Sample`, every line labelled with the site that was verified for it and the
provider, and stamped with the time it was measured (milliseconds, the serving
operator's clock)::

    llm_d_epp_average_running_requests{grid_site="west",grid_provider="pool-a"} 3.5 1700000000123
    grid_provider_config_generation{grid_site="west",grid_provider="pool-a"} 42 1700000000123
    grid_signals_poll_round_end_timestamp_seconds{grid_site="east"} 1700000000.5 1700000000500

Beside each site's rows its operator relays what that site's gateways reported in
flight (docs/selection.md, "Fair share among gateways"): per target candidate, and
the number of gateways reporting::

    grid_gateways_reporting{grid_site="west"} 2 1700000000500
    grid_gateway_in_flight{grid_site="west",grid_target_site="hub",
                           grid_target_provider="pool-a"} 12 1700000000500   (one line)

Lines with one (site, provider, stamp) are one sample. The five load fields use the
llm-d EPP names because the operator relays exactly what the EPP convention means
(per-endpoint averages, ready endpoints, held, deepest queue); docs/signals.md has
the table. Names of sites and providers are restricted to `NAME_PATTERN` so no
label ever needs escaping and a reader can parse strictly.

Bounds, both sides:
* `encode_relay` keeps the body under a byte budget (768 KiB) by cutting, in order,
  older samples, then the detail fields of the newest samples, then whole newest
  samples (peers' stalest first, this site's own last), and returns what it cut.
* `decode_relay` refuses a body over 1 MiB, reads at most `max_lines` rows and
  `max_providers` providers per site, and drops rows it cannot trust, by reason.

Time: a row's age is the responder's `Date` minus the row's stamp, re-based onto
the reader's clock (`at = stamp + offset`, `offset = received_at - Date`), so clock
skew between sites never enters. The caller chooses `offset` (the poller keeps it
steady across polls so a row read twice keeps one local time).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gridroute.core.gateway_load import ReportSums
from gridroute.core.sample import Sample, plausible

RELAY_BUDGET_BYTES = 768 * 1024
"""The operator keeps a `/signals` body under this size."""
READ_LIMIT_BYTES = 1024 * 1024
"""A reader refuses a body over this size (`too_large`) without reading it whole."""
PEER_MAX_LINES = 4096
"""Rows read from one peer per poll."""
PEER_MAX_PROVIDERS = 64
"""Providers accepted per site (the first ones in the body)."""
SKEW_AHEAD_S = 1.0
"""A row stamped more than this after the responder's Date is refused (`skew`)."""
SKEW_BEHIND_S = 86_400.0
"""A row stamped more than this before the responder's Date is refused (`skew`)."""

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"
"""Site and provider names: DNS-label-like, so labels never need escaping."""
NAME_RE = re.compile(NAME_PATTERN)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TIME_HEADER = "X-Grid-Time"
"""Responder's clock in seconds with milliseconds; refines Date's one-second resolution."""
CURSOR_HEADER = "X-Grid-Cursor"
"""Names every row the responder held; sent back as `since=`, it asks for newer rows only."""
ROUND_END = "grid_signals_poll_round_end_timestamp_seconds"
GATEWAY_IN_FLIGHT = "grid_gateway_in_flight"
GATEWAY_DEMAND = "grid_gateway_demand"
"""Per reporting site and target: its gateways' demand beyond what they hold there."""
GATEWAY_UNMET = "grid_gateway_unmet"
"""Per reporting site and target: its gateways' unmet demand (`core/demand.py`)."""
GATEWAY_WANT = "grid_gateway_want"
"""Per reporting site and target: what its gateways want of the free room there, their
shortfall against their demand targets (`core/demand.py`)."""
_TARGETED = (GATEWAY_IN_FLIGHT, GATEWAY_DEMAND, GATEWAY_UNMET, GATEWAY_WANT)
"""The gateway rows labelled with a target candidate, in the order a body carries them."""
GATEWAYS_REPORTING = "grid_gateways_reporting"
GATEWAY_MAX_TARGETS = 64
"""Target candidates relayed per site's gateway sums (the largest counts)."""

# Sample attribute -> series name, in the order lines are written.
FIELDS: tuple[tuple[str, str], ...] = (
    ("running", "llm_d_epp_average_running_requests"),
    ("waiting", "llm_d_epp_average_queue_size"),
    ("ready", "llm_d_epp_ready_endpoints"),
    ("held", "llm_d_epp_flow_control_queue_size"),
    ("generation", "grid_provider_config_generation"),
    ("deepest_queue", "llm_d_epp_per_endpoint_queue_size"),
    ("kv_usage", "llm_d_epp_average_kv_cache_utilization"),
    ("max_running", "grid_provider_max_running"),
)
CORE_FIELDS = frozenset({"running", "waiting", "ready", "held", "generation"})
"""Fields a reading cannot do without; the others are cut first when over budget."""
_BY_NAME = {name: attr for attr, name in FIELDS}


class Store(StrEnum):
    """Whose rows were cut: this site's own providers or rows relayed from peers."""

    LOCAL = "local"
    PEER = "peer"


class Cut(StrEnum):
    """What was cut to fit the budget, least important first."""

    HISTORY = "history"
    """Older samples of a provider (its newest was kept)."""
    DETAIL = "detail"
    """Deepest queue, KV usage and maxRunning of a newest sample."""
    LATEST = "latest"
    """The newest sample of a provider: the provider is missing from the body."""


class DropReason(StrEnum):
    """Why a reader refused a row (`grid_signals_ingest_dropped_total{reason}`)."""

    SKEW = "skew"
    SITE_MISMATCH = "site_mismatch"
    CAP = "cap"
    PARSE = "parse"


class RelayTooLarge(ValueError):
    """A body over the read limit; the poll result is `too_large`."""


class RelayUndecodable(ValueError):
    """A body that is not a signals relay at all (not UTF-8, or rows none of which
    parse, or neither rows nor the header line): the poll result is `undecodable`, a
    failed poll, so a 200 of garbage never reads as "every site reported nothing"."""


HEADER_LINE = b"# gridroute signals v1"
"""The first line `encode_relay` writes."""


@dataclass(frozen=True, slots=True)
class Encoded:
    """A `/signals` body and the rows left out of it, by (store, cut)."""

    body: bytes
    rows: int
    cut: Mapping[tuple[Store, Cut], int]


@dataclass(frozen=True, slots=True)
class Received:
    """One decoded sample, re-based onto the reader's clock, with the responder's stamp.

    `stamp_ms` identifies the sample across polls (the same row read twice has the
    same stamp), which is how stores drop a row they already hold.
    """

    stamp_ms: int
    sample: Sample


@dataclass(frozen=True, slots=True)
class GatewaySums:
    """What one site's gateways reported in flight, summed, as of `at`."""

    at: float
    gateways: int
    """Gateways whose reports are summed (0: the site's operator heard from none)."""
    in_flight: Mapping[str, float] = field(default_factory=dict)
    """Target candidate key (`site/provider`) -> summed in-flight."""
    demand: Mapping[str, float] = field(default_factory=dict)
    """Target candidate key -> summed demand beyond what the gateways hold there
    (`core/demand.py`; empty where no gateway reports demand, or an older operator)."""
    unmet: Mapping[str, float] = field(default_factory=dict)
    """Target candidate key -> summed unmet demand."""
    want: Mapping[str, float] = field(default_factory=dict)
    """Target candidate key -> summed want (empty from an older operator)."""

    @classmethod
    def of(cls, at: float, sums: ReportSums) -> GatewaySums:
        """`sums` (every transport sums reports alike, `core.gateway_load.ReportSums`)
        as of `at`: one place that knows the figures a report carries."""
        return cls(at, sums.gateways, sums.in_flight, sums.demand, sums.unmet, sums.want)


@dataclass(frozen=True, slots=True)
class Decoded:
    """What a reader accepted from one body, and what it refused."""

    received: tuple[Received, ...]
    round_ends: Mapping[str, float]
    """Peer site -> end of the responder's last poll round that tried it (reader's clock)."""
    dropped: Mapping[DropReason, int] = field(default_factory=dict)
    lines: int = 0
    gateways: Mapping[str, GatewaySums] = field(default_factory=dict)
    """Reporting site -> its gateways' summed in-flight (reader's clock)."""

    @property
    def samples(self) -> tuple[Sample, ...]:
        return tuple(r.sample for r in self.received)


# --- encoding -----------------------------------------------------------------------


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _rows_of(sample: Sample, stamp: int, attrs: Iterable[str]) -> list[tuple[int, bytes]]:
    labels = f'{{grid_site="{sample.site}",grid_provider="{sample.provider}"}} '
    out: list[tuple[int, bytes]] = []
    for index, (attr, name) in enumerate(FIELDS):
        if attr not in attrs:
            continue
        value = getattr(sample, attr)
        if value is None or not math.isfinite(value):
            continue
        out.append((index, f"{name}{labels}{_number(float(value))} {stamp}\n".encode()))
    return out


_CORE = tuple(a for a, _ in FIELDS if a in CORE_FIELDS)
_DETAIL = tuple(a for a, _ in FIELDS if a not in CORE_FIELDS)
_ALL = tuple(a for a, _ in FIELDS)


def encode_relay(
    histories: Iterable[Sequence[Sample]],
    round_ends: Mapping[str, float],
    *,
    local_site: str,
    budget: int = RELAY_BUDGET_BYTES,
    gateways: Mapping[str, GatewaySums] | None = None,
) -> Encoded:
    """Render provider histories (each oldest -> newest) and peers' round ends as a body.

    Rows are admitted by importance until `budget` bytes: round ends; the core fields
    of every provider's newest sample; their detail fields; then older samples, newest
    first. Within a tier this site's own rows come before peers' rows and fresher
    before staler. Everything not admitted is counted in `Encoded.cut`. `gateways`
    (reporting site -> sums) are admitted with the round ends, at most
    `GATEWAY_MAX_TARGETS` targets per site, and count against the same budget.
    """
    # Tiers of groups: (peer?, fresher-first key, rows of one sample, store, cut kind).
    # A group is admitted whole, so a reader never sees half a sample (a sample
    # missing its ready row would read as ready).
    # Detail and history of a provider whose newest sample was cut are cut too.
    Group = tuple[int, float, list[tuple[int, bytes]], Store, Cut, str]
    tiers: list[list[Group]] = [[], []]
    history_tiers: list[list[Group]] = []
    for history in histories:
        if not history:
            continue
        newest = history[-1]
        store = Store.LOCAL if newest.site == local_site else Store.PEER
        peer = 0 if store is Store.LOCAL else 1
        stamp = round(newest.at * 1000)
        key = newest.key
        tiers[0].append((peer, -newest.at, _rows_of(newest, stamp, _CORE), store, Cut.LATEST, key))
        detail = _rows_of(newest, stamp, _DETAIL)
        if detail:
            tiers[1].append((peer, -newest.at, detail, store, Cut.DETAIL, key))
        for depth, older in enumerate(reversed(history[:-1])):
            while len(history_tiers) <= depth:
                history_tiers.append([])
            rows_old = _rows_of(older, round(older.at * 1000), _ALL)
            history_tiers[depth].append((peer, -older.at, rows_old, store, Cut.HISTORY, key))
    tiers.extend(history_tiers)

    ends = [
        f'{ROUND_END}{{grid_site="{site}"}} {t:.3f} {round(t * 1000)}\n'.encode()
        for site, t in sorted(round_ends.items())
    ]
    reporting, targeted = _gateway_rows(gateways or {})
    header_cost = 64 * (len(FIELDS) + 5)
    used = header_cost + sum(
        len(e) for e in (*ends, *reporting, *(r for rs in targeted.values() for r in rs))
    )
    kept: list[list[bytes]] = [[] for _ in FIELDS]
    cut: Counter[tuple[Store, Cut]] = Counter()
    admitted: set[str] | None = None  # None while every newest sample fits
    for level, tier in enumerate(tiers):
        sizes = [sum(len(line) for _, line in group[2]) for group in tier]
        if admitted is None and used + sum(sizes) <= budget:
            for group in tier:
                for index, line in group[2]:
                    kept[index].append(line)
            used += sum(sizes)
            continue
        if level == 0:
            admitted = set()
        order = sorted(range(len(tier)), key=lambda i: (tier[i][0], tier[i][1]))
        for i in order:
            _, _, rows_of_group, store, kind, key = tier[i]
            fits = used + sizes[i] <= budget
            if fits and (admitted is None or level == 0 or key in admitted):
                used += sizes[i]
                for index, line in rows_of_group:
                    kept[index].append(line)
                if level == 0 and admitted is not None:
                    admitted.add(key)
            else:
                cut[(store, kind)] += len(rows_of_group)

    parts: list[bytes] = [b"# gridroute signals v1\n"]
    rows = 0
    for (_, name), lines in zip(FIELDS, kept, strict=True):
        if lines:
            parts.append(f"# TYPE {name} gauge\n".encode())
            parts.extend(lines)
            rows += len(lines)
    if ends:
        parts.append(f"# TYPE {ROUND_END} gauge\n".encode())
        parts.extend(ends)
        rows += len(ends)
    for name, lines in ((GATEWAYS_REPORTING, reporting), *targeted.items()):
        if lines:
            parts.append(f"# TYPE {name} gauge\n".encode())
            parts.extend(lines)
            rows += len(lines)
    return Encoded(body=b"".join(parts), rows=rows, cut=dict(cut))


def _gateway_rows(
    gateways: Mapping[str, GatewaySums],
) -> tuple[list[bytes], dict[str, list[bytes]]]:
    """(gateways-reporting rows, per targeted family its rows), each one metric family:
    in-flight, then demand beyond it and unmet demand where gateways reported them."""
    reporting: list[bytes] = []
    out: dict[str, list[bytes]] = {name: [] for name in _TARGETED}
    for site, sums in sorted(gateways.items()):
        stamp = round(sums.at * 1000)
        reporting.append(
            f'{GATEWAYS_REPORTING}{{grid_site="{site}"}} {sums.gateways} {stamp}\n'.encode()
        )
        for name, values in zip(
            _TARGETED,
            (sums.in_flight, sums.demand, sums.unmet, sums.want),
            strict=True,
        ):
            targets = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
            for key, value in targets[:GATEWAY_MAX_TARGETS]:
                tsite, _, tprov = key.partition("/")
                if not (NAME_RE.fullmatch(tsite) and NAME_RE.fullmatch(tprov)):
                    continue
                labels = (
                    f'grid_site="{site}",grid_target_site="{tsite}",grid_target_provider="{tprov}"'
                )
                out[name].append(f"{name}{{{labels}}} {_number(float(value))} {stamp}\n".encode())
    return reporting, out


# --- decoding -----------------------------------------------------------------------

_KEY = re.compile(
    r'\{grid_site="(?P<site>'
    + NAME_PATTERN
    + r')",grid_provider="(?P<provider>'
    + NAME_PATTERN
    + r')"\}.* (?P<stamp>[0-9]{1,15})\s*$'
)
"""Enough of a row to tell which sample it belongs to, when the row itself is bad."""

_ROW = re.compile(
    r'(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\{grid_site="(?P<site>' + NAME_PATTERN + r')"'
    r'(?:,grid_provider="(?P<provider>' + NAME_PATTERN + r')")?'
    r'(?:,grid_target_site="(?P<tsite>' + NAME_PATTERN + r')"'
    r',grid_target_provider="(?P<tprov>' + NAME_PATTERN + r')")?\} '
    r"(?P<value>[^ ]{1,32}) (?P<stamp>[0-9]{1,15})"
)


def sample_of(site: str, provider: str, at: float, fields: Mapping[str, float]) -> Sample:
    """One sample from its fields by `Sample` attribute name (absent stays absent);
    the readers of the relay rows (`/signals`, a Prometheus query) build samples here."""
    generation = fields.get("generation")
    return Sample(
        site=site,
        provider=provider,
        at=at,
        running=fields.get("running"),
        waiting=fields.get("waiting"),
        ready=fields.get("ready"),
        held=fields.get("held"),
        deepest_queue=fields.get("deepest_queue"),
        kv_usage=fields.get("kv_usage"),
        max_running=fields.get("max_running"),
        generation=None if generation is None else int(generation),
    )


def decode_relay(
    body: bytes,
    *,
    date: float,
    offset: float,
    expected_site: str | None = None,
    max_lines: int = PEER_MAX_LINES,
    max_providers: int = PEER_MAX_PROVIDERS,
) -> Decoded:
    """Accept the rows of a `/signals` body that a reader can trust.

    `date` is the responder's Date header (seconds), `offset` what to add to a
    responder time to get a reader time. With `expected_site`, only rows about that
    site are accepted (a peer speaks for itself only). Rows past `max_lines`, or of
    providers past the first `max_providers` of a site, are dropped as `cap`.

    A reader never sees half a sample: a row that does not parse (a NaN, a fractional
    generation) or that was cut by `max_lines` takes its whole sample with it, the
    sample's other rows counted under the same reason; otherwise a sample missing its
    `ready` row would read as one ready endpoint.

    Raises `RelayTooLarge` for a body over `READ_LIMIT_BYTES` and `RelayUndecodable`
    for a body that is not a relay at all.
    """
    if len(body) > READ_LIMIT_BYTES:
        raise RelayTooLarge(f"body of {len(body)} bytes over {READ_LIMIT_BYTES}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RelayUndecodable(f"not UTF-8 at byte {exc.start}") from None
    poisoned: dict[tuple[str, str, int], DropReason] = {}
    parsed = 0
    dropped: Counter[DropReason] = Counter()
    fields: dict[tuple[str, str, int], dict[str, float]] = {}
    providers: dict[str, set[str]] = {}
    round_ends: dict[str, float] = {}
    gw_counts: dict[str, tuple[int, float]] = {}
    gw_targets: dict[str, dict[str, dict[str, float]]] = {name: {} for name in _TARGETED}
    newest_ok_ms = (date + SKEW_AHEAD_S) * 1000.0
    oldest_ok_ms = (date - SKEW_BEHIND_S) * 1000.0
    match_row = _ROW.fullmatch
    lines = 0
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        lines += 1
        if lines > max_lines:
            dropped[DropReason.CAP] += 1
            _poison(poisoned, line, DropReason.CAP)
            continue
        m = match_row(line.rstrip("\r"))
        if m is None:
            dropped[DropReason.PARSE] += 1
            _poison(poisoned, line, DropReason.PARSE)
            continue
        parsed += 1
        metric, site, provider = m["metric"], m["site"], m["provider"]
        attr = _BY_NAME.get(metric)
        gateway_row = metric in _TARGETED or metric == GATEWAYS_REPORTING
        if attr is None and metric != ROUND_END and not gateway_row:
            continue  # a newer operator's series: ignored, not an error
        try:
            value = float(m["value"])
        except ValueError:
            value = math.nan
        targeted = m["tsite"] is not None
        if (
            not math.isfinite(value)
            # A negative count is outside the contract, as the reference's hub refuses
            # it: clamped to 0 it read a lying peer's site as idle, and drew traffic.
            or (attr is not None and value < 0.0)
            or (attr is None) != (provider is None)
            or targeted != (metric in _TARGETED)
        ):
            dropped[DropReason.PARSE] += 1
            if provider is not None:
                poisoned.setdefault((site, provider, int(m["stamp"])), DropReason.PARSE)
            continue
        if expected_site is not None and site != expected_site:
            dropped[DropReason.SITE_MISMATCH] += 1
            continue
        stamp = int(m["stamp"])
        if stamp > newest_ok_ms or stamp < oldest_ok_ms:
            dropped[DropReason.SKEW] += 1
            continue
        if metric == GATEWAYS_REPORTING:
            if not value.is_integer() or value < 0 or value > PEER_MAX_LINES:
                dropped[DropReason.PARSE] += 1
                continue
            gw_counts[site] = (int(value), stamp / 1000.0 + offset)
            continue
        if metric in _TARGETED:
            targets = gw_targets[metric].setdefault(site, {})
            if len(targets) >= GATEWAY_MAX_TARGETS:
                dropped[DropReason.CAP] += 1
                continue
            count = plausible(value)
            if count is not None:
                targets[f"{m['tsite']}/{m['tprov']}"] = count
            continue
        if attr is None:
            round_ends[site] = value + offset
            continue
        assert provider is not None
        seen = providers.setdefault(site, set())
        if provider not in seen:
            if len(seen) >= max_providers:
                dropped[DropReason.CAP] += 1
                continue
            seen.add(provider)
        if attr == "generation" and not value.is_integer():
            dropped[DropReason.PARSE] += 1
            poisoned.setdefault((site, provider, stamp), DropReason.PARSE)
            continue
        fields.setdefault((site, provider, stamp), {})[attr] = value

    if lines and not parsed:
        raise RelayUndecodable(f"none of {lines} rows parse")
    if not lines and not body.startswith(HEADER_LINE):
        raise RelayUndecodable("neither rows nor the relay's header line")
    received = []
    for (site, provider, stamp), values in fields.items():
        reason = poisoned.get((site, provider, stamp))
        if reason is not None:
            dropped[reason] += len(values)  # the rest of a sample with a bad row
            continue
        sample = sample_of(site, provider, stamp / 1000.0 + offset, values).sanitized()
        received.append(Received(stamp_ms=stamp, sample=sample))
    received.sort(key=lambda r: (r.sample.site, r.sample.provider, r.stamp_ms))
    gateways = {
        site: GatewaySums(at, n, *(gw_targets[name].get(site, {}) for name in _TARGETED))
        for site, (n, at) in gw_counts.items()
    }
    return Decoded(
        received=tuple(received),
        round_ends=round_ends,
        dropped=dict(dropped),
        lines=lines,
        gateways=gateways,
    )


def _poison(poisoned: dict[tuple[str, str, int], DropReason], line: str, why: DropReason) -> None:
    """Mark the sample a refused row belongs to, when the row names one."""
    m = _KEY.search(line)
    if m is not None:
        poisoned.setdefault((m["site"], m["provider"], int(m["stamp"])), why)
