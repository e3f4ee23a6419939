"""The drain record: OME's `ome.io/traffic-drain` annotation JSON (reference 4.6).

    {"maintenance-a": {"cluster": "cluster-a", "reason": "planned maintenance"}}

One entry per drain ID; several IDs may hold the same cluster. Parsing is strict, as the
reference's is: a duplicate ID, an unknown field, a missing cluster, a name that is not
a DNS label or too many entries is refused with `DrainError`, and the map that reads it
stops moving (its route keeps its weights) until the record is fixed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gridroute.core.trafficmap import Drain

ANNOTATION = "ome.io/traffic-drain"
MAX_DRAINS = 64
MAX_REASON_CHARS = 256
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class DrainError(ValueError):
    """A drain record that cannot be read; the message starts with the reference's words."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DrainError(f"parse {ANNOTATION}: duplicate key {key!r}")
        out[key] = value
    return out


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL.match(value):
        raise DrainError(f"parse {ANNOTATION}: {what} must be a DNS label, got {value!r}")
    return value


def parse_drains(text: str) -> tuple[Drain, ...]:
    """The drains in an annotation's JSON text (empty text: none), sorted by ID."""
    if not text.strip():
        return ()
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
        reason = body.get("reason", "")
        if not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS:
            raise DrainError(
                f"parse {ANNOTATION}: {drain_id}: reason must be text of at most "
                f"{MAX_REASON_CHARS} characters"
            )
        drains.append(Drain(drain_id, cluster, reason))
    return tuple(sorted(drains, key=lambda d: d.id))


def encode_drains(drains: tuple[Drain, ...]) -> str:
    """The annotation text for `drains` (IDs sorted; `parse_drains` reads it back)."""
    body = {
        d.id: {"cluster": d.cluster, "reason": d.reason} for d in sorted(drains, key=lambda d: d.id)
    }
    return json.dumps(body, indent=2) + "\n"
