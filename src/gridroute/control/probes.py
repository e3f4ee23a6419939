"""Routing health probes: one HTTP request from the control plane to a home's endpoint,
turned into a verdict the gate (`core.probegate`) folds in.

An accepted status passes; a gating status, a transport error or a timeout fails (the
home is unreachable along the client's path). Any other status (a 404 from a wrong
path, a 401) is Unknown: the prober is misconfigured, which is uniform across homes and
so must never gate. An endpoint that is not an http(s) URL gets no probe at all and
keeps its weight (one invalid home does not block probing the others).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from gridroute.control.config import ProbeSpec
from gridroute.core.probegate import ProbeResult


@dataclass(frozen=True, slots=True)
class Verdict:
    result: ProbeResult
    message: str


def probeable(endpoint: str | None) -> bool:
    parts = urlsplit(endpoint or "")
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def policy_digest(spec: ProbeSpec) -> str:
    """`sha256:<hex>` of the effective probe policy (hysteresis restores only on a match).

    The status lists are sets: sorted and deduplicated first (as OME's digest), so
    `[503, 500, 500]` and `[500, 503]` are one policy."""
    policy = spec.model_dump(mode="json")
    for field in ("accept_statuses", "gate_statuses"):
        policy[field] = sorted(set(policy[field]))
    body = json.dumps(policy, sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


async def probe(session: aiohttp.ClientSession, endpoint: str, spec: ProbeSpec) -> Verdict:
    """Probe `endpoint` once with `spec`'s method, path and timeout."""
    url = endpoint.rstrip("/") + spec.path
    timeout = aiohttp.ClientTimeout(total=spec.timeout_seconds)
    try:
        async with session.request(spec.method, url, timeout=timeout) as resp:
            await resp.read()
            status = resp.status
    except TimeoutError:
        return Verdict(ProbeResult.FAILING, f"{spec.method} {spec.path}: timed out")
    except (aiohttp.ClientError, OSError) as exc:
        return Verdict(ProbeResult.FAILING, f"{spec.method} {spec.path}: {type(exc).__name__}")
    except asyncio.CancelledError:
        raise
    if status in spec.accept_statuses:
        return Verdict(ProbeResult.PASSING, f"{spec.method} {spec.path}: {status}")
    if status in spec.gate_statuses:
        return Verdict(ProbeResult.FAILING, f"{spec.method} {spec.path}: {status} (gating)")
    return Verdict(
        ProbeResult.UNKNOWN, f"{spec.method} {spec.path}: {status} is neither accepted nor gating"
    )
