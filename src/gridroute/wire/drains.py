"""The drain record: OME's `ome.io/traffic-drain` annotation JSON (reference 4.6).

    {"maintenance-a": {"cluster": "cluster-a", "reason": "planned maintenance"}}

One entry per drain ID; several IDs may hold the same cluster. No record means no
drains; a record that is there is parsed strictly, as the reference's is: empty text, a
duplicate ID, an unknown field, a missing cluster or reason, a name that is not a DNS
label, a reason that is empty, untrimmed, over 256 bytes or holds a control character,
or too many entries is refused with `DrainError`, and the map that reads it stops moving
(its route keeps its weights) until the record is fixed.

`request_problem` is what `gridroute traffic drain|undrain` asks of a new drain and of
every drain already in the record before it rewrites it (OME's
ValidateTrafficDrainRequest): the parser's rules, and no value that looks like a secret.
Cluster names are DNS labels, as control.yaml's are (OME's may be DNS-1123 subdomains; a
dotted name could never name a gridroute home).
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Literal

from gridroute.core.trafficmap import Drain
from gridroute.wire.trafficmap import DNS_LABEL

ANNOTATION = "ome.io/traffic-drain"
MAX_DRAINS = 64
MAX_REASON_BYTES = 256
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Control, format and line/paragraph separator characters (OME's reason rule)."""
_SECRET_LIKE = re.compile(
    r"(?:^|[^A-Za-z0-9])sk-[A-Za-z0-9_-]{20,}"
    r"|^[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}$"
)
"""OME's credential shapes (pkg/cli/mutate): an `sk-` API key, or a whole value shaped like a
JWT. A shape guard, not a secret scanner."""
DrainField = Literal["id", "cluster", "reason"]


class DrainError(ValueError):
    """A drain record that cannot be read; the message starts with the reference's words."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DrainError(f"parse {ANNOTATION}: duplicate key {key!r}")
        out[key] = value
    return out


def _name_problem(value: str) -> str | None:
    if not DNS_LABEL.match(value):
        return "must be a DNS label (lowercase letters, digits and '-', at most 63 characters)"
    return None


def _reason_problem(value: str, *, stored: bool = False) -> str | None:
    """Why `value` cannot be a drain's reason, or None. `stored`: a record already in the
    store, read as written by gridroute before it checked reasons (its CLI's default was
    the empty reason): an empty or untrimmed one is kept, so an upgrade does not hold the
    service's map at its last table nor lock `undrain` out of the record."""
    if not stored and not value.strip():
        return "must not be empty"
    if not stored and value != value.strip():
        return "must not start or end with whitespace"
    if len(value.encode()) > MAX_REASON_BYTES:
        return f"must be at most {MAX_REASON_BYTES} bytes"
    if any(unicodedata.category(ch) in _UNSAFE_CATEGORIES for ch in value):
        return "must not hold control characters (a line break, a tab, ...)"
    return None


def request_problem(drain: Drain, *, stored: bool = False) -> tuple[DrainField, str] | None:
    """(field, why) when `drain` cannot be written by the drain CLI, else None (`stored`:
    an entry already in the record, see `_reason_problem`)."""
    checks: tuple[tuple[DrainField, str | None], ...] = (
        ("cluster", _name_problem(drain.cluster)),
        ("id", _name_problem(drain.id)),
        ("reason", _reason_problem(drain.reason, stored=stored)),
    )
    for field, problem in checks:
        if problem is not None:
            return field, problem
    # Only the free text: names are DNS labels already, and `sk-` opens real ones (a
    # Slovak cluster, `sk-bratislava-production-1`).
    if _SECRET_LIKE.search(drain.reason):
        return "reason", "looks like a secret (an API key or a token); leave it out"
    return None


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise DrainError(f"parse {ANNOTATION}: {what} must be text, got {value!r}")
    problem = _name_problem(value)
    if problem is not None:
        raise DrainError(f"parse {ANNOTATION}: {what} {problem}, got {value!r}")
    return value


def parse_drains(text: str) -> tuple[Drain, ...]:
    """The drains in an annotation's JSON text, sorted by ID. The text must be a JSON
    object (`{}`: no drains); an absent record, not an empty one, means no drains."""
    if not text.strip():
        raise DrainError(
            f"parse {ANNOTATION}: the record is empty; write {{}} (or remove it) for no drains"
        )
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise DrainError(f"parse {ANNOTATION}: {exc}") from None
    if not isinstance(data, dict):
        raise DrainError(f"parse {ANNOTATION}: expected an object of drain IDs")
    if len(data) > MAX_DRAINS:
        raise DrainError(f"parse {ANNOTATION}: {len(data)} drains, at most {MAX_DRAINS}")
    drains = []
    for drain_id, body in data.items():
        _name(drain_id, "drain ID")
        if not isinstance(body, dict):
            raise DrainError(f"parse {ANNOTATION}: {drain_id}: expected an object")
        unknown = set(body) - {"cluster", "reason"}
        if unknown:
            raise DrainError(f"parse {ANNOTATION}: {drain_id}: unknown field(s) {sorted(unknown)}")
        cluster = _name(body.get("cluster"), f"{drain_id}: cluster")
        reason = body.get("reason", "")  # left out by records of earlier versions
        problem = (
            "must be text" if not isinstance(reason, str) else _reason_problem(reason, stored=True)
        )
        if problem is not None:
            raise DrainError(f"parse {ANNOTATION}: {drain_id}: reason {problem}")
        drains.append(Drain(drain_id, cluster, reason))
    return tuple(sorted(drains, key=lambda d: d.id))


def encode_drains(drains: tuple[Drain, ...]) -> str:
    """The annotation text for `drains` (IDs sorted; `parse_drains` reads it back)."""
    body = {
        d.id: {"cluster": d.cluster, "reason": d.reason} for d in sorted(drains, key=lambda d: d.id)
    }
    return json.dumps(body, indent=2) + "\n"
