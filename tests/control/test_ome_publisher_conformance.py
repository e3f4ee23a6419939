"""OME TrafficMap conformance, control layer: the scenarios of OME's Go tests
(ome-projects/ome) that need HTTP probes, capacity polls, control.yaml validation, the
reconcile loop, the `gatewayapi` publisher's objects or the drain CLI, re-stated
against gridroute (control.*, wire.httproute, wire.drains, `gridroute traffic`).

Upstream files: pkg/controller/v1beta1/placement/routing/{prober,capacity,resolver,
controller,manual_drain}_test.go, pkg/controller/v1beta1/placement/endpoint/
{gatewayapi,gatewayapi_trafficmap}_test.go, pkg/trafficdrain/annotation_test.go and
pkg/cli/mutate/traffic_drain_test.go. Each docstring names its test (and case).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from pydantic import ValidationError
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.control.config import CapacityPolling, OperatorRef, ProbeSpec, Publish, parse
from gridroute.control.map_objects import read as read_maps
from gridroute.control.probes import policy_digest, probe, probeable
from gridroute.control.readings import read_capacity
from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.capacityreport import ReportPolicy
from gridroute.core.capacityreport import read as read_reports
from gridroute.core.probegate import ProbeResult
from gridroute.core.trafficmap import Drain
from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.drains import DrainError, parse_drains
from gridroute.wire.httproute import (
    PlanRefused,
    RouteOptions,
    backend_name,
    claimed_target,
    render,
)
from gridroute.wire.trafficmap import MapEntry, Metadata, Spec, TrafficMap, rfc3339

from .controlfiles import Clock, seed, write
from .livehomes import Endpoint, free_port

runner = CliRunner()
NS, SVC = "llama-demo", "llama-chat"


# --- helpers ----------------------------------------------------------------------------


def run(rec: Reconciler, session: aiohttp.ClientSession | None = None):
    return asyncio.run(rec.run_once(session))


def stored(tmp: Path) -> TrafficMap | None:
    return Store(tmp / "state").read_map(NS, SVC)


def the_map(tmp: Path) -> TrafficMap:
    tm = stored(tmp)
    assert tm is not None
    return tm


def cond(tm: TrafficMap, kind: str) -> tuple[str, str]:
    c = tm.status.condition(kind)
    assert c is not None, kind
    return c.status, c.reason


def route_file(tmp: Path) -> Path:
    return tmp / "routes" / NS / f"{SVC}-global.yaml"


def route_docs(tmp: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(route_file(tmp).read_text()))


class PathEndpoint(Endpoint):
    """A home's endpoint that also records the paths it was asked for."""

    def __init__(self, status: int = 200) -> None:
        super().__init__()
        self.status = status
        self.paths: list[str] = []

    async def _any(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        return await super()._any(request)


class Served:
    """One operator-like HTTP server answering every path with a fixed status and body."""

    def __init__(self, status: int, body: str | bytes) -> None:
        self.status, self.body = status, body
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _any(self, _: web.Request) -> web.Response:
        return web.Response(status=self.status, body=self.body, content_type="application/json")

    async def __aenter__(self) -> Served:
        application = web.Application()
        application.router.add_route("*", "/{tail:.*}", self._any)
        self._runner = web.AppRunner(application, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


# --- prober_test.go: HTTP verdicts --------------------------------------------------------

OME_PROBE = {
    "path": "/healthz/deep",
    "method": "GET",
    "acceptStatuses": [200],
    "gateStatuses": [500, 502, 503],
    "periodSeconds": 1,
    "timeoutSeconds": 0.5,
    "failureThreshold": 3,
    "successThreshold": 2,
}


def test_probe_config_classify_status_against_real_responses() -> None:
    """prober_test.go::TestProbeConfig_ClassifyStatus (every case: 200 passes, a listed
    503 gates, 429 / 401 / 403 / an unlisted 302 are inconclusive) and
    ::TestProber_ProbeOneClassifiesRealResponses (200, 503, 429), over real HTTP."""
    spec = ProbeSpec.model_validate(OME_PROBE)
    want = {
        200: ProbeResult.PASSING,
        503: ProbeResult.FAILING,
        429: ProbeResult.UNKNOWN,
        401: ProbeResult.UNKNOWN,
        403: ProbeResult.UNKNOWN,
        302: ProbeResult.UNKNOWN,
    }

    async def body() -> dict[int, ProbeResult]:
        ep = PathEndpoint()
        await ep.start()
        got = {}
        try:
            async with aiohttp.ClientSession() as session:
                for status in want:
                    ep.status = status
                    got[status] = (await probe(session, ep.url, spec)).result
        finally:
            await ep.stop()
        assert set(ep.paths) == {"/healthz/deep"}
        return got

    assert asyncio.run(body()) == want


def test_prober_unreachable_endpoint_is_a_failure_not_an_error() -> None:
    """prober_test.go::TestProber_UnreachableEndpointIsAFailureNotAnError: a refused
    connection is the home's failure (Failing), not a prober error."""
    spec = ProbeSpec.model_validate(OME_PROBE)

    async def body() -> ProbeResult:
        async with aiohttp.ClientSession() as session:
            return (await probe(session, f"http://127.0.0.1:{free_port()}", spec)).result

    assert asyncio.run(body()) is ProbeResult.FAILING


def test_prober_malformed_url_cannot_gate() -> None:
    """prober_test.go::TestProber_MalformedURLCannotGate: a request that cannot even be
    built is never a gating verdict (gridroute: such an endpoint is not probed at all)."""
    assert not probeable("://not a url")
    assert not probeable("invalid.example")


def probed_seed(tmp: Path, endpoints: list[str], **probe_fields: object) -> dict[str, Any]:
    data = seed()
    data["probe"] = {**OME_PROBE, **probe_fields}
    for h, url in zip(data["services"][0]["homes"], endpoints, strict=True):
        h["endpoint"] = url
    return data


def test_reconcile_invalid_probe_endpoint_does_not_block_valid_target(tmp_path: Path) -> None:
    """controller_test.go::TestReconcile_InvalidProbeEndpointDoesNotBlockValidTarget: one
    home's endpoint is not an http(s) URL: it gets no probe block, stays healthy and
    positive; the other is probed on the configured path (Passing); Routable True."""

    async def body() -> None:
        ep = PathEndpoint(200)
        await ep.start()
        try:
            data = probed_seed(tmp_path, ["ftp://invalid.example", ep.url])
            rec = Reconciler(write(tmp_path, data), clock=Clock())
            async with aiohttp.ClientSession() as session:
                await rec.run_once(session)
        finally:
            await ep.stop()
        assert ep.paths == ["/healthz/deep"]

    asyncio.run(body())
    invalid, valid = the_map(tmp_path).spec.entries
    assert (invalid.probe, invalid.healthy, invalid.weight > 0) == (None, True, True)
    assert valid.probe is not None and (valid.probe.result, valid.probe.gated) == ("Passing", None)
    assert valid.healthy and valid.weight > 0
    assert cond(the_map(tmp_path), "Routable")[0] == "True"


def test_reconcile_inline_probe_policy_drives_observation(tmp_path: Path) -> None:
    """controller_test.go::TestReconcile_InlineProbePolicyDrivesObservationAndRequeue: an
    inline probe (path /inline-ready, period 3 s, timeout 1 s, thresholds 1/1, Drain) over
    a global one: the request goes to the inline path; a 503 gates the only home at once:
    weight 0, unhealthy, probe Failing / gated, policyDigest of the effective policy,
    lastProbeTime = now. (The requeue interval is the reconciler's scheduling; not ported.)"""
    clock = Clock()

    async def body() -> list[str]:
        ep = PathEndpoint(503)
        await ep.start()
        try:
            data = probed_seed(tmp_path, [ep.url, ep.url])
            data["services"][0]["homes"].pop()
            data["services"][0]["routing"] = {
                "probe": {
                    "path": "/inline-ready",
                    "periodSeconds": 3,
                    "timeoutSeconds": 1,
                    "failureThreshold": 1,
                    "successThreshold": 1,
                    "allFailedPolicy": "Drain",
                }
            }
            rec = Reconciler(write(tmp_path, data), clock=clock)
            async with aiohttp.ClientSession() as session:
                await rec.run_once(session)
            svc = rec.loaded.services[0]
            assert the_map(tmp_path).spec.entries[0].probe is not None
            digest = policy_digest(svc.probe(rec.loaded.config.probe))
            assert the_map(tmp_path).spec.entries[0].probe.policy_digest == digest  # type: ignore[union-attr]
        finally:
            await ep.stop()
        return ep.paths

    assert asyncio.run(body()) == ["/inline-ready"]
    (entry,) = the_map(tmp_path).spec.entries
    assert (entry.weight, entry.healthy) == (0, False)
    assert entry.probe is not None and (entry.probe.result, entry.probe.gated) == ("Failing", True)
    assert entry.probe.last_probe_time == rfc3339(clock.now)


def test_reconcile_inline_probe_disable_skips_global_probe(tmp_path: Path) -> None:
    """controller_test.go::TestReconcile_InlineProbeDisableSkipsGlobalProbe: the global
    probe would gate (503, threshold 1) but the service's inline `disabled: true` means
    no request, no probe block, healthy entries."""

    async def body() -> int:
        ep = PathEndpoint(503)
        await ep.start()
        try:
            data = probed_seed(tmp_path, [ep.url, ep.url], failureThreshold=1)
            data["services"][0]["routing"] = {"probe": {"disabled": True}}
            rec = Reconciler(write(tmp_path, data), clock=Clock())
            async with aiohttp.ClientSession() as session:
                await rec.run_once(session)
        finally:
            await ep.stop()
        return len(ep.paths)

    assert asyncio.run(body()) == 0
    entries = the_map(tmp_path).spec.entries
    assert [(e.probe, e.healthy, e.weight) for e in entries] == [(None, True, 2), (None, True, 1)]


def test_prober_reachable_is_nil_when_probing_is_off(tmp_path: Path) -> None:
    """prober_test.go::TestProber_ReachableIsNilWhenProbingIsOff: probing off -> no
    verdict, no gating, no probe provenance on any entry."""
    run(Reconciler(write(tmp_path, seed()), clock=Clock()))
    assert [(e.probe, e.weight) for e in the_map(tmp_path).spec.entries] == [(None, 2), (None, 1)]


# --- capacity_test.go: polling the report ------------------------------------------------

POLLING = CapacityPolling.model_validate(
    {
        "enabled": True,
        "path": "/capacity/{provider}",
        "periodSeconds": 1,
        "timeoutSeconds": 0.5,
        "maxAgeSeconds": 30,
    }
)


def poll(status: int, body: str | bytes, *, closed: bool = False):
    async def go():
        async with Served(status, body) as server, aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{free_port()}" if closed else server.url
            return await read_capacity(session, OperatorRef(url=url, provider="pool-a"), POLLING)

    return asyncio.run(go())


def report(servable: object, observed: object = "now") -> str:
    body: dict[str, object] = {"servable": servable}
    if observed == "now":
        body["observedAt"] = rfc3339(Clock().now)
    elif observed is not None:
        body["observedAt"] = observed
    return json.dumps(body)


@pytest.mark.parametrize("servable", [3, 0], ids=["AcceptsAFreshReport", "AcceptsAReportOfZero"])
def test_capacity_poller_accepts_a_fresh_report(servable: int) -> None:
    """capacity_test.go::TestCapacityPoller_AcceptsAFreshReport and
    ::TestCapacityPoller_AcceptsAReportOfZero: the report is taken, 0 included."""
    attempt = poll(200, report(servable))
    assert attempt.report is not None and attempt.report.servable == servable
    assert attempt.error is None


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(503, report(2), id="non-200 response"),
        pytest.param(200, "not json", id="unparsable body"),
        pytest.param(200, report(-1), id="negative servable count"),
        pytest.param(200, report(2, observed=None), id="report with no observedAt stamp"),
    ],
)
def test_capacity_poller_fails_open_on_every_bad_answer(status: int, body: str) -> None:
    """capacity_test.go::TestCapacityPoller_FailsOpenOnEveryBadAnswer (the HTTP and
    parsing cases; "stale report beyond maxAge" is in the core file): no report, and a
    reason an operator can read."""
    attempt = poll(status, body)
    assert attempt.report is None and attempt.error


def test_capacity_poller_fails_open_on_a_stale_polled_report() -> None:
    """capacity_test.go::TestCapacityPoller_FailsOpenOnEveryBadAnswer / "stale report
    beyond maxAge", end to end: an hour-old report is parsed, then not used."""
    attempt = poll(200, report(2, observed=Clock().now - 3600))
    reading = read_reports((attempt,), Clock().now, ReportPolicy(30.0, 1))
    assert reading.reported is None and reading.fallback_reason


def test_capacity_poller_unreachable_endpoint_falls_open() -> None:
    """capacity_test.go::TestCapacityPoller_UnreachableEndpointFallsOpen."""
    attempt = poll(200, report(2), closed=True)
    assert attempt.report is None and attempt.error


def test_capacity_poller_body_is_bounded() -> None:
    """capacity_test.go::TestCapacityPoller_BodyIsBounded: a 256 KiB body gives no report
    (with a reason), and does not break the poll."""
    attempt = poll(200, b"a" * (64 * 4096))
    assert attempt.report is None and attempt.error


def test_capacity_poller_reported_is_nil_when_polling_is_off(tmp_path: Path) -> None:
    """capacity_test.go::TestCapacityPoller_ReportedIsNilWhenPollingIsOff: polling off ->
    no report, no fallback reason, CapacityFallback False / CapacityPollingDisabled."""
    run(Reconciler(write(tmp_path, seed()), clock=Clock()))
    tm = the_map(tmp_path)
    assert all(
        e.capacity is not None
        and e.capacity.reported is None
        and e.capacity.fallback_reason is None
        for e in tm.spec.entries
    )
    assert cond(tm, "CapacityFallback") == ("False", "CapacityPollingDisabled")


# --- capacity_test.go / resolver_test.go: policy validation -----------------------------

OME_CAPACITY = {
    "enabled": True,
    "path": "/capacity",
    "method": "GET",
    "periodSeconds": 1,
    "timeoutSeconds": 0.5,
    "maxAgeSeconds": 30,
}


def capacity_ok(**fields: object) -> bool:
    try:
        CapacityPolling.model_validate({**OME_CAPACITY, **fields})
    except ValidationError:
        return False
    return True


def probe_ok(**fields: object) -> bool:
    try:
        ProbeSpec.model_validate({**OME_PROBE, **fields})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        pytest.param({}, True, id="fully configured is valid"),
        pytest.param({"path": "capacity"}, False, id="relative path rejected"),
        pytest.param({"method": ""}, False, id="missing method rejected"),
        pytest.param({"periodSeconds": 0}, False, id="zero period rejected"),
        pytest.param({"timeoutSeconds": 0}, False, id="zero timeout rejected"),
        pytest.param({"timeoutSeconds": 1}, False, id="timeout >= period rejected"),
        pytest.param({"maxAgeSeconds": 0}, False, id="zero maxAge rejected"),
        pytest.param({"maxAgeSeconds": 0.5}, False, id="maxAge < period rejected"),
    ],
)
def test_capacity_config_validate(fields: dict[str, object], valid: bool) -> None:
    """capacity_test.go::TestCapacityConfig_Validate (every case but "disabled is valid",
    which is the next test)."""
    assert capacity_ok(**fields) is valid


def test_capacity_config_validate_disabled_is_valid() -> None:
    """capacity_test.go::TestCapacityConfig_Validate / "disabled is valid"."""
    assert CapacityPolling().enabled is False


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        pytest.param({}, True, id="fully configured is valid"),
        pytest.param({"disabled": True}, True, id="disabled is valid"),
        pytest.param({"path": "health"}, False, id="relative path rejected"),
        pytest.param({"method": ""}, False, id="missing method rejected"),
        pytest.param({"acceptStatuses": []}, False, id="missing accept statuses rejected"),
        pytest.param({"gateStatuses": []}, False, id="missing gate statuses rejected"),
        pytest.param(
            {"gateStatuses": [500, 502, 503, 200]}, False, id="status in both lists rejected"
        ),
        pytest.param({"periodSeconds": 0}, False, id="zero period rejected"),
        pytest.param({"timeoutSeconds": 0}, False, id="zero timeout rejected"),
        pytest.param({"timeoutSeconds": 1}, False, id="timeout >= period rejected"),
        pytest.param({"failureThreshold": 0}, False, id="zero failure threshold rejected"),
        pytest.param({"successThreshold": 0}, False, id="zero success threshold rejected"),
    ],
)
def test_probe_config_validate(fields: dict[str, object], valid: bool) -> None:
    """capacity_test.go::TestProbeConfig_Validate (every case)."""
    assert probe_ok(**fields) is valid


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        pytest.param({}, True, id="default format is Report"),
        pytest.param({"format": "Report"}, True, id="explicit Report is valid"),
        pytest.param({"format": "Bogus"}, False, id="unregistered format rejected"),
        pytest.param({"options": {"example": "1"}}, False, id="options rejected for Report"),
    ],
)
def test_capacity_config_validate_formats(fields: dict[str, object], valid: bool) -> None:
    """capacity_test.go::TestCapacityConfig_ValidateFormats (every case)."""
    assert capacity_ok(**fields) is valid


@pytest.mark.parametrize(
    ("fields", "valid"),
    [
        pytest.param({}, True, id="unset uses package defaults"),
        pytest.param({"samples": 5, "quorum": 3}, True, id="explicit values are valid"),
        pytest.param({"samples": -1}, False, id="negative samples rejected"),
        pytest.param({"quorum": -1}, False, id="negative quorum rejected"),
        pytest.param({"samples": 3, "quorum": 4}, False, id="quorum above samples rejected"),
        pytest.param({"samples": 3, "quorum": 3}, True, id="quorum equal to samples is valid"),
    ],
)
def test_capacity_config_quorum_and_samples_validation(
    fields: dict[str, object], valid: bool
) -> None:
    """capacity_test.go::TestCapacityConfig_QuorumAndSamplesValidation (every case)."""
    assert capacity_ok(**fields) is valid


INLINE_MERGES = pytest.mark.xfail(
    strict=True,
    reason="deliberate: gridroute's inline probe is a field-by-field overlay on the global "
    "one; docs/trafficmap.md (control.yaml): 'probe: {failureThreshold: 2}  # inline "
    "fields over the global probe'. OME replaces the block atomically and refuses a "
    "partial one or one combining disabled with other fields.",
)


def service_probe(inline: dict[str, object], global_probe: dict[str, object] | None = None):
    """The effective probe of a service with `inline` over `global_probe` (OME's
    ResolveProbePolicy), or the refusal message."""
    data = seed()
    data["probe"] = global_probe or OME_PROBE
    data["services"][0]["routing"] = {"probe": inline}
    loaded = parse(data, "control.yaml", Path("."))
    if loaded.refused:
        return loaded.refused[0].message
    return loaded.services[0].probe(loaded.config.probe)


def test_resolve_config_observer_blocks_disabled_blocks_clear() -> None:
    """resolver_test.go::TestResolveConfigObserverBlocks / "disabled blocks clear" and
    ::TestResolveProbePolicyInlineReplacementAndDisable (the disable half)."""
    effective = service_probe({"disabled": True})
    assert isinstance(effective, ProbeSpec) and effective.disabled


def test_resolve_probe_policy_inline_replacement() -> None:
    """resolver_test.go::TestResolveConfigObserverBlocks / "inline blocks replace
    atomically" and ::TestResolveProbePolicyInlineReplacementAndDisable: a complete
    inline block is the effective probe, field for field."""
    inline = {
        "path": "/ready",
        "method": "HEAD",
        "acceptStatuses": [204],
        "gateStatuses": [500, 503],
        "periodSeconds": 120,
        "timeoutSeconds": 7,
        "failureThreshold": 4,
        "successThreshold": 5,
        "allFailedPolicy": "Drain",
    }
    effective = service_probe(inline)
    assert isinstance(effective, ProbeSpec)
    assert effective.model_dump(by_alias=True, mode="json", exclude={"disabled"}) == inline


@INLINE_MERGES
def test_resolve_config_observer_blocks_partial_inline_block_does_not_merge() -> None:
    """resolver_test.go::TestResolveConfigObserverBlocks / "partial inline block does not
    merge global fields" and ::TestResolveProbePolicyValidationScope (first case): an
    inline probe with only a path is refused ("spec.routing.probe.method is required")."""
    assert isinstance(service_probe({"path": "/replacement"}), str)


@INLINE_MERGES
def test_resolve_probe_policy_disabled_must_not_be_combined() -> None:
    """resolver_test.go::TestResolveProbePolicyValidationScope (second case) and
    ::TestResolveConfigRunsSharedRoutingValidation / "disabled probe is exclusive":
    `disabled` together with another field is refused."""
    assert isinstance(service_probe({"disabled": True, "path": "/conflicting"}), str)


@pytest.mark.parametrize(
    "inline",
    [
        pytest.param({"acceptStatuses": [99]}, id="HTTP status is bounded"),
        pytest.param({"method": "DELETE"}, id="HTTP method is restricted"),
    ],
)
def test_resolve_config_runs_shared_routing_validation(inline: dict[str, object]) -> None:
    """resolver_test.go::TestResolveConfigRunsSharedRoutingValidation (the probe cases;
    publisher options have no gridroute counterpart)."""
    assert isinstance(service_probe(inline), str)


def test_resolve_probe_policy_validation_scope_invalid_global_method() -> None:
    """resolver_test.go::TestResolveProbePolicyValidationScope (global method DELETE is
    refused)."""
    assert not probe_ok(method="DELETE")


def test_resolve_probe_policy_digest_is_canonical() -> None:
    """resolver_test.go::TestResolveProbePolicyDigestIsCanonicalAndComplete (first half):
    reordered and duplicated status lists are the same policy, so the same digest."""
    base = ProbeSpec.model_validate(
        {**OME_PROBE, "acceptStatuses": [204, 200], "gateStatuses": [503, 500]}
    )
    again = ProbeSpec.model_validate(
        {**OME_PROBE, "acceptStatuses": [200, 204, 200], "gateStatuses": [500, 503, 503]}
    )
    assert policy_digest(base) == policy_digest(again)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", policy_digest(base))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"path": "/other"}, id="path"),
        pytest.param({"method": "HEAD"}, id="method"),
        pytest.param({"acceptStatuses": [200, 201]}, id="accept statuses"),
        pytest.param({"gateStatuses": [500, 502]}, id="gate statuses"),
        pytest.param({"periodSeconds": 2}, id="period"),
        pytest.param({"timeoutSeconds": 0.75}, id="timeout"),
        pytest.param({"failureThreshold": 4}, id="failure threshold"),
        pytest.param({"successThreshold": 3}, id="success threshold"),
        pytest.param({"allFailedPolicy": "Drain"}, id="all failed policy"),
    ],
)
def test_resolve_probe_policy_digest_is_complete(change: dict[str, object]) -> None:
    """resolver_test.go::TestResolveProbePolicyDigestIsCanonicalAndComplete (second half,
    every mutation): any field change is a new digest."""
    base = ProbeSpec.model_validate(OME_PROBE)
    changed = ProbeSpec.model_validate({**OME_PROBE, **change})
    assert policy_digest(base) != policy_digest(changed)


def test_resolve_capacity_policy_inline_replacement_and_disable(tmp_path: Path) -> None:
    """resolver_test.go::TestResolveCapacityPolicyInlineReplacementAndDisable,
    controller_test.go::TestReconcile_InlineCapacityDisableSkipsGlobalCapacity and
    ::TestReconcile_InlineCapacityPolicyDrivesObservationAndRequeue: a service may carry
    its own capacity block (`spec.routing.capacity`, `disabled: true` included) and it is
    accepted. The inline block replaces the global one whole (POST /deep-capacity, 3 m,
    9 s, samples 7, quorum 3, maxAge 10 m); `disabled` leaves no policy at all."""
    inline = {
        "path": "/deep-capacity",
        "method": "POST",
        "periodSeconds": 180,
        "timeoutSeconds": 9,
        "samples": 7,
        "quorum": 3,
        "maxAgeSeconds": 600,
    }
    data = seed()
    data["capacityPolling"] = OME_CAPACITY
    data["services"][0]["routing"] = {"capacity": inline}
    loaded = parse(data, "control.yaml", Path("."))
    assert not loaded.refused
    got = loaded.services[0].capacity(loaded.config.capacity_polling)
    assert got == CapacityPolling.model_validate({**inline, "enabled": True, "format": "Report"})

    data["services"][0]["routing"] = {"capacity": {"disabled": True}}
    loaded = parse(data, "control.yaml", Path("."))
    assert loaded.services[0].capacity(loaded.config.capacity_polling) is None
    result = run(Reconciler(write(tmp_path, data), clock=Clock()))
    assert result.services[0].outcome is PublishOutcome.PUBLISHED, result.errors
    assert cond(the_map(tmp_path), "CapacityFallback") == ("False", "CapacityPollingDisabled")
    for entry in the_map(tmp_path).spec.entries:  # the plan stands, with no fallback reason
        assert entry.capacity is not None
        assert (entry.capacity.source, entry.capacity.fallback_reason) == ("ControlPlane", None)


def test_resolve_capacity_policy_validation_attribution() -> None:
    """resolver_test.go::TestResolveCapacityPolicyValidationScopeAndAttribution ("disabled
    must not be combined with capacity configuration fields", and an inline error is
    attributed to the service's block) and config_test.go's quorum span: an inline
    maxAge must span `quorum` periods."""
    cases = {
        "disabled: must not be combined": {"disabled": True, "path": "/conflicting"},
        "method: Input should be": {"method": "DELETE"},
        "maxAgeSeconds: must span at least quorum (3)": {
            "samples": 3,
            "quorum": 3,
            "periodSeconds": 10,
            "maxAgeSeconds": 25,
        },
    }
    for want, block in cases.items():
        data = seed()
        data["services"][0]["routing"] = {"capacity": block}
        loaded = parse(data, "control.yaml", Path("."))
        assert not loaded.services
        assert f"services[llama-chat].routing.capacity.{want}" in loaded.refused[0].message


def test_resolve_capacity_policy_accepts_the_ome_methods() -> None:
    """resolver_test.go::TestResolveCapacityPolicyInlineReplacementAndDisable (its POST
    block: path /deep-capacity, POST, period 3 m, timeout 9 s, samples 7, quorum 3,
    maxAge 10 m) and ::TestResolveCapacityPolicyValidationScopeAndAttribution ("method
    DELETE must be GET, HEAD, or POST")."""
    block = {
        "path": "/deep-capacity",
        "periodSeconds": 180,
        "timeoutSeconds": 9,
        "samples": 7,
        "quorum": 3,
        "maxAgeSeconds": 600,
    }
    assert not capacity_ok(**block, method="DELETE")
    assert capacity_ok(**block, method="POST")


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"format": "Unavailable"}, id="unregistered format"),
        pytest.param({"options": {"unexpected": "value"}}, id="options for Report"),
    ],
)
def test_resolve_capacity_policy_validation_scope(change: dict[str, object]) -> None:
    """resolver_test.go::TestResolveCapacityPolicyValidationScopeAndAttribution (format
    and options cases)."""
    assert not capacity_ok(**change)


# --- controller_test.go / manual_drain_test.go through the reconcile loop ---------------


def test_reconcile_validates_routing_policy_before_observation(tmp_path: Path) -> None:
    """controller_test.go::TestReconcile_ValidatesCompleteRoutingPolicyBeforeObservation /
    "non-positive routing capacity factor": the service is refused with "must be
    positive" and no TrafficMap is created for it. (The "duplicate capacity-factor
    sources" case concerns OME's deprecated spec.placement.capacityFactors: no
    counterpart.)"""
    data = seed()
    data["services"][0]["routing"] = {"capacityFactors": {"cluster-a": "0"}}
    result = run(Reconciler(write(tmp_path, data), clock=Clock()))
    assert result.services[0].outcome is PublishOutcome.INVALID_OWNER
    assert "must be positive" in result.errors[0]
    assert stored(tmp_path) is None


def test_reconcile_disabled_reaps_existing_traffic_map(tmp_path: Path) -> None:
    """controller_test.go::TestReconcile_DisabledReapsExistingTrafficMap and
    gatewayapi_test.go::TestUnpublish_DeletesRouteAndAllServices: turning routing off for
    the service removes its route (with its backend Services) and then its map."""
    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    assert route_file(tmp_path).exists() and stored(tmp_path) is not None
    data["services"][0]["routing"] = {"enabled": False}
    write(tmp_path, data)
    for _ in range(2):
        run(rec)
    assert not route_file(tmp_path).exists()
    assert stored(tmp_path) is None


def test_reconcile_invalid_traffic_drain_preserves_last_valid_traffic_map(
    tmp_path: Path,
) -> None:
    """manual_drain_test.go::TestReconcile_InvalidTrafficDrainPreservesLastValidTrafficMap:
    a drain holds cluster-a (0:1); a malformed record (`{"drain":`) is an error naming
    ome.io/traffic-drain, and the map keeps generation, weights and drainRefs."""
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    store = Store(tmp_path / "state")
    store.write_drains(NS, SVC, (Drain("drain", "cluster-a", "mitigation"),))
    run(rec)
    before = the_map(tmp_path)
    assert [e.weight for e in before.spec.entries] == [0, 1]
    store.drain_path(NS, SVC).write_text('{"drain":')
    result = run(rec)
    assert any("ome.io/traffic-drain" in e for e in result.errors)
    after = the_map(tmp_path)
    assert after.metadata.generation == before.metadata.generation
    assert [e.weight for e in after.spec.entries] == [0, 1]
    assert after.spec.entries[0].drain_refs == ["drain"]


# --- trafficdrain/annotation_test.go ----------------------------------------------------


def test_parse_valid_overrides_are_sorted_by_id() -> None:
    """annotation_test.go::TestParse / "valid overrides are sorted by ID" and "empty
    object means no overrides"."""
    got = parse_drains(
        '{"drain-z":{"reason":"second hold","cluster":"cluster-b"},'
        '"drain-a":{"cluster":"cluster-a","reason":"first hold"}}'
    )
    assert got == (
        Drain("drain-a", "cluster-a", "first hold"),
        Drain("drain-z", "cluster-b", "second hold"),
    )
    assert parse_drains("{}") == ()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("", id="empty"),
        pytest.param("[]", id="array"),
        pytest.param("null", id="null"),
        pytest.param(
            '{"drain":{"cluster":"a","reason":"one"},"drain":{"cluster":"b","reason":"two"}}',
            id="duplicate ID",
        ),
        pytest.param('{"":{"cluster":"a","reason":"one"}}', id="empty ID"),
        pytest.param('{" drain":{"cluster":"a","reason":"one"}}', id="whitespace ID"),
        pytest.param('{"drain":"cluster-a"}', id="non-object override"),
        pytest.param('{"drain":{"reason":"one"}}', id="missing cluster"),
        pytest.param(
            '{"drain":{"cluster":"a"}}',
            id="missing reason",
            marks=pytest.mark.xfail(
                strict=True,
                reason="deliberate: docs/trafficmap.md, Store: a record in the store is read as "
                "earlier gridroute versions wrote it (their CLI's default reason was empty), so an "
                "upgrade does not hold the map at its last table; the CLI refuses such a reason "
                "for anything it writes",
            ),
        ),
        pytest.param(
            '{"drain":{"cluster":"a","reason":" "}}',
            id="empty reason",
            marks=pytest.mark.xfail(
                strict=True,
                reason="deliberate: docs/trafficmap.md, Store: a record in the store is read as "
                "earlier gridroute versions wrote it (their CLI's default reason was empty), so an "
                "upgrade does not hold the map at its last table; the CLI refuses such a reason "
                "for anything it writes",
            ),
        ),
        pytest.param('{"drain":{"cluster":" a","reason":"one"}}', id="whitespace cluster"),
        pytest.param('{"drain":{"cluster":"a","reason":"one","weight":"0"}}', id="unknown field"),
        pytest.param(
            '{"drain":{"cluster":"a","cluster":"b","reason":"one"}}', id="duplicate field"
        ),
        pytest.param('{"drain":{"cluster":1,"reason":"one"}}', id="non-string field"),
        pytest.param("{} {}", id="trailing data"),
    ],
)
def test_parse_refuses(raw: str) -> None:
    """annotation_test.go::TestParse (every refusal case; the message texts are OME's own
    words, so only the refusal and gridroute's "parse ome.io/traffic-drain:" prefix are
    compared)."""
    with pytest.raises(DrainError, match=r"^parse ome\.io/traffic-drain"):
        parse_drains(raw)


def test_from_annotations(tmp_path: Path) -> None:
    """annotation_test.go::TestFromAnnotations: no record -> no drains; a record -> its
    drain (the annotation is gridroute's drain file)."""
    store = Store(tmp_path)
    assert store.read_drains(NS, SVC) == ()
    path = store.drain_path(NS, SVC)
    path.parent.mkdir(parents=True)
    path.write_text('{"drain":{"cluster":"a","reason":"mitigation"}}')
    assert store.read_drains(NS, SVC) == (Drain("drain", "a", "mitigation"),)


# --- cli/mutate/traffic_drain_test.go: `gridroute traffic drain|undrain` ----------------


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A store reconciled from the seed (cluster-a 2, cluster-b 1)."""
    run(Reconciler(write(tmp_path, seed()), clock=Clock()))
    return tmp_path / "state"


def traffic(state: Path, *args: str):
    return runner.invoke(app, ["traffic", *args, "--service", SVC, "--store", str(state)])


def record(state: Path) -> dict[str, Any] | None:
    path = Store(state).drain_path(NS, SVC)
    return json.loads(path.read_text()) if path.exists() else None


def put(state: Path, raw: str) -> None:
    path = Store(state).drain_path(NS, SVC)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw)


def test_prepare_traffic_drain_writes_one_targeted_record(state: Path) -> None:
    """traffic_drain_test.go::TestPrepareTrafficDrainBuildsGuardedTargetedPatch / "nil
    annotations add map ...": the drain writes exactly one ID-keyed entry."""
    got = traffic(
        state, "drain", "cluster-a", "--id", "maintenance-a", "--reason", "node maintenance"
    )
    assert got.exit_code == 0, got.output
    assert record(state) == {
        "maintenance-a": {"cluster": "cluster-a", "reason": "node maintenance"}
    }


def test_prepare_traffic_drain_preserves_existing_ids(state: Path) -> None:
    """traffic_drain_test.go::TestPrepareTrafficDrainBuildsGuardedTargetedPatch /
    "existing annotations and drain IDs are preserved" (sorted by ID)."""
    put(state, '{"z-hold":{"reason":"capacity incident","cluster":"cluster-b"}}')
    got = traffic(state, "drain", "cluster-a", "--id", "a-hold", "--reason", "planned maintenance")
    assert got.exit_code == 0, got.output
    rec = record(state)
    assert rec is not None and list(rec) == ["a-hold", "z-hold"]
    assert rec["z-hold"] == {"cluster": "cluster-b", "reason": "capacity incident"}


def test_traffic_drain_escapes_the_logical_value(state: Path) -> None:
    """traffic_drain_test.go::TestTrafficDrainPatchEscapesAnnotationPathAndLogicalValue:
    a reason with quotes, backslashes and angle brackets reads back exactly."""
    reason = 'rack "A" \\\\ planned <maintenance>'
    got = traffic(state, "drain", "cluster-a", "--id", "escape-check", "--reason", reason)
    assert got.exit_code == 0, got.output
    assert Store(state).read_drains(NS, SVC) == (Drain("escape-check", "cluster-a", reason),)


def test_prepare_traffic_undrain_removes_only_the_selected_id(state: Path) -> None:
    """traffic_drain_test.go::TestPrepareTrafficUndrainBuildsTargetedPatch / "remove only
    selected ID and retain the annotation" and "last ID removes only the traffic
    annotation"."""
    put(
        state,
        '{"remove-me":{"cluster":"cluster-a","reason":"done"},'
        '"keep-me":{"cluster":"cluster-b","reason":"still draining"}}',
    )
    got = traffic(state, "undrain", "cluster-a", "--id", "remove-me")
    assert got.exit_code == 0, got.output
    assert record(state) == {"keep-me": {"cluster": "cluster-b", "reason": "still draining"}}
    got = traffic(state, "undrain", "cluster-b", "--id", "keep-me")
    assert got.exit_code == 0, got.output
    assert record(state) is None


MANY = json.dumps({f"id-{i:03d}": {"cluster": "cluster-a", "reason": "safe"} for i in range(65)})
SIXTY_FOUR = json.dumps(
    {f"id-{i:03d}": {"cluster": "cluster-a", "reason": "safe"} for i in range(64)}
)


@pytest.mark.parametrize(
    ("existing", "args"),
    [
        pytest.param(
            "{",
            ["drain", "cluster-a", "--id", "new", "--reason", "safe"],
            id="malformed annotation",
        ),
        pytest.param(
            '{"same":{"cluster":"cluster-a","reason":"one"},'
            '"same":{"cluster":"cluster-b","reason":"two"}}',
            ["undrain", "cluster-a", "--id", "same"],
            id="duplicate ID in annotation",
        ),
        pytest.param(
            '{"same":{"cluster":"cluster-a","reason":"one","weight":"0"}}',
            ["undrain", "cluster-a", "--id", "same"],
            id="unknown field in annotation",
        ),
        pytest.param(
            "x" * (32 * 1024 + 1),
            ["undrain", "cluster-a", "--id", "same"],
            id="oversized annotation",
        ),
        pytest.param(MANY, ["undrain", "cluster-a", "--id", "id-000"], id="too many overrides"),
        pytest.param(
            SIXTY_FOUR,
            ["drain", "cluster-a", "--id", "one-more", "--reason", "safe"],
            id="adding beyond override limit",
        ),
        pytest.param(
            '{"BAD ID":{"cluster":"cluster-a","reason":"one"}}',
            ["undrain", "cluster-a", "--id", "safe-id"],
            id="existing unsafe ID",
        ),
        pytest.param(
            '{"safe-id":{"cluster":"BAD_CLUSTER","reason":"one"}}',
            ["undrain", "cluster-a", "--id", "safe-id"],
            id="existing unsafe cluster",
        ),
        pytest.param(
            '{"safe-id":{"cluster":"cluster-a","reason":"line\\nbreak"}}',
            ["undrain", "cluster-a", "--id", "safe-id"],
            id="existing unsafe reason",
        ),
        pytest.param(
            '{"same":{"cluster":"cluster-a","reason":"safe"}}',
            ["drain", "cluster-a", "--id", "same", "--reason", "safe"],
            id="drain refuses existing ID even when identical",
        ),
        pytest.param(
            None,
            ["undrain", "cluster-a", "--id", "missing"],
            id="undrain refuses absent annotation",
        ),
        pytest.param(
            '{"other":{"cluster":"cluster-a","reason":"safe"}}',
            ["undrain", "cluster-a", "--id", "missing"],
            id="undrain refuses absent ID",
        ),
    ],
)
def test_prepare_traffic_drain_fails_closed(
    state: Path, existing: str | None, args: list[str]
) -> None:
    """traffic_drain_test.go::TestPrepareTrafficDrainFailsClosed (every case that has a
    gridroute counterpart; the metadata byte and annotation-count bounds belong to the
    InferenceService object): the command is refused and the record is left as it was."""
    if existing is not None:
        put(state, existing)
    path = Store(state).drain_path(NS, SVC)
    before = snapshot(path)
    got = traffic(state, *args)
    assert got.exit_code != 0, got.output
    assert snapshot(path) == before


def snapshot(path: Path) -> object:
    """The record's content (its JSON members in order, duplicates kept), or its text
    when it is not JSON; a rewrite in another layout is no change."""
    if not path.exists():
        return None
    text = path.read_text()
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: pairs)
    except ValueError:
        return text


@pytest.mark.parametrize(
    ("drain_id", "cluster", "reason"),
    [
        pytest.param(
            "maintenance-1",
            "worker-a.example",
            "Replace node pool #2 after 02:00 UTC",
            id="dotted cluster, punctuated reason",
            marks=pytest.mark.xfail(
                strict=True,
                reason="deliberate: docs/trafficmap.md, 'Where this differs from OME': "
                "cluster names are DNS labels (control.yaml's Name), not DNS-1123 subdomains",
            ),
        ),
        pytest.param(
            "maintenance-1",
            "worker-a",
            "Replace node pool #2 after 02:00 UTC",
            id="punctuated reason",
        ),
        pytest.param(
            "unicode-reason", "worker-a", "planned maintenance — rack 2", id="unicode reason"
        ),
    ],
)
def test_validate_traffic_drain_request_accepts(
    tmp_path: Path, drain_id: str, cluster: str, reason: str
) -> None:
    """traffic_drain_test.go::TestValidateTrafficDrainRequestMatchesAdmissionAndKubernetes
    Names (the valid drain requests; a cluster is a DNS-1123 subdomain upstream)."""
    data = seed()
    data["services"][0]["homes"][0]["cluster"] = cluster
    loaded = parse(data, "control.yaml", tmp_path)
    assert not loaded.refused, loaded.refused
    run(Reconciler(write(tmp_path, data), clock=Clock()))
    got = traffic(tmp_path / "state", "drain", cluster, "--id", drain_id, "--reason", reason)
    assert got.exit_code == 0, got.output
    assert record(tmp_path / "state") == {drain_id: {"cluster": cluster, "reason": reason}}


@pytest.mark.parametrize(
    ("drain_id", "cluster", "reason"),
    [
        pytest.param("", "cluster-a", "safe", id="empty ID"),
        pytest.param("Bad_ID", "cluster-a", "safe", id="Bad_ID"),
        pytest.param("a" * 64, "cluster-a", "safe", id="64-character ID"),
        pytest.param("safe", "BAD_CLUSTER", "safe", id="BAD_CLUSTER"),
        pytest.param("safe", "cluster-a", "", id="empty reason"),
        pytest.param("safe", "cluster-a", " leading", id="untrimmed reason"),
        pytest.param("safe", "cluster-a", "line\nbreak", id="control character in reason"),
        pytest.param("safe", "cluster-a", "r" * 257, id="reason over 256 bytes"),
        pytest.param("safe", "cluster-a", "sk-123456789012345678901234", id="secret-like reason"),
    ],
)
def test_validate_traffic_drain_request_refuses(
    state: Path, drain_id: str, cluster: str, reason: str
) -> None:
    """traffic_drain_test.go::TestValidateTrafficDrainRequestMatchesAdmissionAndKubernetes
    Names (the invalid drain requests; undrain takes only an ID upstream and only
    CLUSTER [--id] here, so its two cases have no counterpart): refused, nothing
    written."""
    got = runner.invoke(
        app,
        [
            "traffic",
            "drain",
            cluster,
            "--service",
            SVC,
            "--namespace",
            NS,
            "--id",
            drain_id,
            "--reason",
            reason,
            "--store",
            str(state),
        ],
    )
    assert got.exit_code != 0, got.output
    assert record(state) is None


# --- gatewayapi_trafficmap_test.go / gatewayapi_test.go: the published objects ----------

BASE = RouteOptions(
    global_gateway="ome-system/global-gw",
    backend_port=8080,
    host_template="{{.Name}}.{{.Namespace}}.global.example",
)


def tmap(*entries: tuple[str, str | None, int], name: str = "svc", ns: str = "prod") -> TrafficMap:
    return TrafficMap(
        metadata=Metadata(name=name, namespace=ns),
        spec=Spec(
            service=name,
            entries=[
                MapEntry(cluster=c, endpoint=None if h is None else f"https://{h}", weight=w)
                for c, h, w in entries
            ],
        ),
    )


def refs(route: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = route["spec"]["rules"]
    return list(rule["backendRefs"])


@pytest.mark.xfail(
    strict=True,
    reason="deliberate: docs/trafficmap.md, 'Where this differs from OME': '`Published` "
    'names the publishers that ran (`directory`, `overlay`), not "gatewayapi".\'',
)
def test_gateway_api_traffic_map_publisher_name_is_gatewayapi(tmp_path: Path) -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPublisherIdentityAndOptions:
    the built-in publisher is named "gatewayapi" (status.publisher.publisherName and the
    Published message)."""
    run(Reconciler(write(tmp_path, seed()), clock=Clock()))
    tm = the_map(tmp_path)
    assert tm.status.publisher is not None and tm.status.publisher.publisher_name == "gatewayapi"
    published = tm.status.condition("Published")
    assert published is not None
    assert published.message == 'TrafficMap is published by publisher "gatewayapi"'


def test_gateway_api_traffic_map_plan_applies_weights() -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPlanIsImmutableAndAppliesWeights:
    a map listing cluster-b (0) before cluster-a (7), global host from the annotation:
    one rule, backendRefs cluster-a at 7 then cluster-b at 0, the annotation's hostname,
    the route prod/svc-global, claim v1:httproute:prod/svc-global."""
    tm = tmap(("cluster-b", "b.example", 0), ("cluster-a", "a.example", 7))
    rendered = render(tm, replace(BASE, hostname="original.global.example"))
    route = rendered.route
    assert (route["metadata"]["namespace"], route["metadata"]["name"]) == ("prod", "svc-global")
    assert route["spec"]["hostnames"] == ["original.global.example"]
    assert claimed_target("prod", "svc-global") == "v1:httproute:prod/svc-global"
    got = [(r["name"], r["weight"]) for r in refs(route)]
    assert got == [
        (backend_name("prod", "svc", "cluster-a"), 7),
        (backend_name("prod", "svc", "cluster-b"), 0),
    ]


DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_gateway_api_traffic_map_backend_names_use_structured_identities() -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapBackendNamesUseStructuredIdentities:
    backend names are deterministic DNS-1035 labels that fit an EndpointSlice suffix even
    for 63-character names, and tuples that flatten alike ("model"+"blue-global-west" vs
    "model-global-blue"+"west", "9model" vs "a9model") do not collide. (OME's legacy
    route-name quirk for a leading digit is not ported.)"""
    names = [
        backend_name("prod", "9model.team", "cluster.us"),
        backend_name("prod", "s" * 63, "c" * 63),
    ]
    for name in names:
        assert DNS1035.match(name) and len(name + "-ipv6") <= 63
    assert backend_name("prod", "9model.team", "cluster.us") == names[0]
    assert backend_name("prod", "9model", "cluster-a") != backend_name(
        "prod", "a9model", "cluster-a"
    )
    assert backend_name("prod", "model", "blue-global-west") != backend_name(
        "prod", "model-global-blue", "west"
    )


def test_gateway_api_traffic_map_apply_preserves_empty_and_all_zero_maps() -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapApplyPreservesEmptyAndAllZeroMaps:
    an empty map is still published (one rule, no backendRefs, no backend Service); an
    all-zero map keeps both backendRefs at weight 0."""
    empty = render(tmap(), BASE)
    assert refs(empty.route) == [] and empty.services == []
    zero = render(tmap(("cluster-a", "a.example", 0), ("cluster-b", "b.example", 0)), BASE)
    assert [r["weight"] for r in refs(zero.route)] == [0, 0]


def test_gateway_api_traffic_map_apply_withdraws_when_host_is_removed(tmp_path: Path) -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapApplyWithdrawsWhenHostIsRemoved:
    without a global host (no annotation, no template) the plan is a withdrawal, before
    the 16-backendRef limit is looked at; the published route is removed."""
    seventeen = tmap(*((f"cluster-{i:02d}", f"{i}.example", 1) for i in range(17)))
    with pytest.raises(PlanRefused) as refused:
        render(seventeen, RouteOptions(global_gateway="ome-system/global-gw", backend_port=8080))
    assert refused.value.outcome is PublishOutcome.WITHDRAWN

    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    assert route_file(tmp_path).exists()
    del data["publish"]["globalHostTemplate"]
    write(tmp_path, data)
    run(rec)
    assert not route_file(tmp_path).exists()
    tm = the_map(tmp_path)
    assert cond(tm, "Published") == ("False", "Withdrawn") and tm.status.gateway_ref is None


def test_gateway_api_traffic_map_apply_withdraws_when_config_is_disabled() -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapApplyWithdrawsWhenConfigIsDisabled:
    backend port 0 (unset) withdraws."""
    with pytest.raises(PlanRefused) as refused:
        render(tmap(("cluster-a", "a.example", 5)), replace(BASE, backend_port=None))
    assert refused.value.outcome is PublishOutcome.WITHDRAWN


def refused_plan(tmp: Path, entries: list[dict[str, Any]], opts: RouteOptions = BASE) -> bool:
    """Whether gridroute refuses to publish a map with these entries, as a map file given
    to `trafficmap publish` (read, then rendered)."""
    doc = {
        "apiVersion": "ome.io/v1beta1",
        "kind": "TrafficMap",
        "metadata": {"name": "svc", "namespace": "prod"},
        "spec": {"service": "svc", "entries": entries},
    }
    path = tmp / "map.yaml"
    path.write_text(yaml.safe_dump(doc))
    got = read_maps([path])
    if got.refused:
        return True
    try:
        render(got.maps[0].map, opts)
    except PlanRefused:
        return True
    return False


def entry(cluster: str, host: str | None, weight: int) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": cluster, "weight": weight}
    if host is not None:
        out["endpoint"] = f"https://{host}"
    return out


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param(
            [entry(f"cluster-{i:02d}", f"{i}.example", 1) for i in range(17)],
            id="more than 16 backendRefs",
        ),
        pytest.param([entry("", "a.example", 1)], id="empty cluster"),
        pytest.param(
            [entry("cluster-a", "a.example", 1), entry("cluster-a", "b.example", 1)],
            id="duplicate cluster",
        ),
        pytest.param([entry("cluster-a", None, 1)], id="missing endpoint"),
        pytest.param([entry("cluster-a", "a.example", -1)], id="negative weight"),
        pytest.param([entry("cluster-a", "a.example", 1_000_001)], id="weight above Gateway limit"),
        pytest.param([entry("cluster-a", "UPPER.example", 1)], id="invalid backend hostname"),
        pytest.param([entry("cluster-a", "192.0.2.1", 1)], id="IP backend hostname"),
        pytest.param([entry("INVALID", "a.example", 1)], id="invalid cluster name"),
        pytest.param([entry("a" * 64, "a.example", 1)], id="cluster cannot fit label"),
    ],
)
def test_gateway_api_traffic_map_plan_rejects_invalid_inputs(
    tmp_path: Path, entries: list[dict[str, Any]]
) -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPlanRejectsInvalidInputs
    (every entry case)."""
    assert refused_plan(tmp_path, entries)


def test_gateway_api_traffic_map_plan_accepts_long_distinct_clusters(tmp_path: Path) -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPlanRejectsInvalidInputs
    (two 61-character clusters that differ early are both kept)."""
    a, b = "c13303-" + "a" * 54, "c82303-" + "a" * 54
    assert not refused_plan(tmp_path, [entry(a, "a.example", 1), entry(b, "b.example", 1)])
    rendered = render(tmap((a, "a.example", 1), (b, "b.example", 1)), BASE)
    assert len({s["metadata"]["name"] for s in rendered.services}) == 2


@pytest.mark.parametrize(
    ("hostname", "refused"),
    [
        pytest.param("INVALID.example", True, id="invalid global hostname"),
        pytest.param("*.example.com", False, id="wildcard first label is allowed"),
    ],
)
def test_gateway_api_traffic_map_plan_validates_the_global_hostname(
    tmp_path: Path, hostname: str, refused: bool
) -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPlanRejectsInvalidInputs
    (the global-host annotation cases)."""
    opts = replace(BASE, hostname=hostname)
    assert refused_plan(tmp_path, [], opts) is refused


@pytest.mark.parametrize(
    "publish",
    [
        pytest.param({"backendPort": 65_536}, id="port above protocol limit"),
        pytest.param({"globalGateway": "system/edge/extra"}, id="gateway has extra separator"),
        pytest.param({"globalGateway": "INVALID/edge"}, id="gateway has invalid namespace"),
        pytest.param({"globalGateway": "system/INVALID"}, id="gateway has invalid name"),
    ],
)
def test_gateway_api_traffic_map_plan_validates_published_resource_config(
    publish: dict[str, Any],
) -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPlanValidatesPublishedResourceConfig
    (the port and gateway cases; operator labels and the TLS well-known-CA option have no
    gridroute counterpart)."""
    with pytest.raises(ValidationError):
        Publish.model_validate(
            {"globalGateway": "gateway-system/global", "backendPort": 80, **publish}
        )


def test_gateway_api_traffic_map_plan_refuses_a_name_that_cannot_be_a_label() -> None:
    """gatewayapi_trafficmap_test.go::TestGatewayAPITrafficMapPlanValidatesPublishedResourceConfig
    (a 64-character service name cannot be a label value)."""
    data = seed()
    data["services"][0]["name"] = "a" * 64
    assert parse(data, "control.yaml", Path(".")).refused


def test_build_external_name_service() -> None:
    """gatewayapi_test.go::TestBuildExternalNameService: per home an ExternalName Service
    aliasing the home's host on the backend port, in the route's namespace, labelled with
    the service, its namespace and the cluster."""
    (svc,) = render(tmap(("cluster-a", "svc.prod.cloud-a.example", 1)), BASE).services
    assert svc["metadata"]["namespace"] == "prod"
    assert svc["spec"]["type"] == "ExternalName"
    assert svc["spec"]["externalName"] == "svc.prod.cloud-a.example"
    assert [p["port"] for p in svc["spec"]["ports"]] == [8080]
    labels = svc["metadata"]["labels"]
    assert labels["ome.io/placement-endpoint-isvc"] == "svc"
    assert "prod" in labels.values() and "cluster-a" in labels.values()


def test_build_http_route_single_home() -> None:
    """gatewayapi_test.go::TestBuildHTTPRoute_SingleHome: route prod/svc-global, one
    hostname, the ISVC label, parentRef Gateway ome-system/global-gw, one rule with one
    Service backendRef on 8080 at weight 1 and no filters, matching prefix "/"."""
    route = render(tmap(("cluster-a", "svc.prod.cloud-a.example", 1)), BASE).route
    assert (route["metadata"]["name"], route["metadata"]["namespace"]) == ("svc-global", "prod")
    assert route["spec"]["hostnames"] == ["svc.prod.global.example"]
    assert route["metadata"]["labels"]["ome.io/placement-endpoint-isvc"] == "svc"
    (parent,) = route["spec"]["parentRefs"]
    assert (parent["namespace"], parent["name"], parent["kind"]) == (
        "ome-system",
        "global-gw",
        "Gateway",
    )
    (ref,) = refs(route)
    assert (ref["kind"], ref["port"], ref["weight"], ref.get("filters")) == (
        "Service",
        8080,
        1,
        None,
    )
    (rule,) = route["spec"]["rules"]
    assert [m["path"]["value"] for m in rule["matches"]] == ["/"]


def test_build_http_route_multi_home_sorted() -> None:
    """gatewayapi_test.go::TestBuildHTTPRoute_MultiHomeEqualWeightSorted: homes given
    out of order come out sorted by cluster, one backendRef each."""
    route = render(tmap(("cluster-b", "b.example", 1), ("cluster-a", "a.example", 1)), BASE).route
    assert [r["name"] for r in refs(route)] == [
        backend_name("prod", "svc", "cluster-a"),
        backend_name("prod", "svc", "cluster-b"),
    ]


def test_build_http_route_gateway_backend_rewrites_each_home_hostname() -> None:
    """gatewayapi_test.go::TestBuildHTTPRoute_GatewayBackendRewritesEachHomeHostname."""
    opts = replace(BASE, rewrite_hostname=True)
    route = render(tmap(("cluster-a", "a.example", 1), ("cluster-b", "b.example", 1)), opts).route
    assert [r["filters"] for r in refs(route)] == [
        [{"type": "URLRewrite", "urlRewrite": {"hostname": "a.example"}}],
        [{"type": "URLRewrite", "urlRewrite": {"hostname": "b.example"}}],
    ]


def test_build_resources_route_namespace_override() -> None:
    """gatewayapi_test.go::TestBuildResources_RouteNamespaceOverride: with a route
    namespace the route and its Services live there and the backendRef resolves there."""
    opts = replace(BASE, route_namespace="ome-gateways")
    rendered = render(tmap(("c", "b", 1)), opts)
    assert rendered.route["metadata"]["namespace"] == "ome-gateways"
    assert [s["metadata"]["namespace"] for s in rendered.services] == ["ome-gateways"]
    (ref,) = refs(rendered.route)
    assert ref.get("namespace", rendered.route["metadata"]["namespace"]) == "ome-gateways"


def test_build_http_route_bare_gateway_name() -> None:
    """gatewayapi_test.go::TestBuildHTTPRoute_BareGatewayName: no namespace in the
    parentRef (the route's own namespace)."""
    opts = replace(BASE, global_gateway="global-gw")
    (parent,) = render(tmap(("c", "b", 1)), opts).route["spec"]["parentRefs"]
    assert parent["name"] == "global-gw" and "namespace" not in parent


SLICES = RouteOptions(
    global_gateway="ome-system/global-gw",
    backend_port=443,
    host_template="{{.Name}}.{{.Namespace}}.global.example",
    rewrite_hostname=True,
    backend_tls=True,
    backend_type="EndpointSlice",
    addresses={"cluster-a": ("192.0.2.10", "2001:db8::10")},
)


def test_publish_gateway_backend_creates_endpoint_slices_and_tls_policy() -> None:
    """gatewayapi_test.go::TestPublish_GatewayBackendCreatesEndpointSlicesAndTLSPolicy: one
    EndpointSlice per family (-ipv4 / -ipv6) labelled with the Service and a manager that
    is not Kubernetes' own, port 443, each address a ready, serving, non-terminating
    endpoint (unset serving reads as ready, unset terminating as false); a
    BackendTLSPolicy targeting the Service, validating the home's host against the
    system CAs."""
    rendered = render(tmap(("cluster-a", "svc.prod.cloud-a.example", 1)), SLICES)
    (svc,) = rendered.services
    name = svc["metadata"]["name"]
    by_name = {s["metadata"]["name"]: s for s in rendered.endpoint_slices}
    assert {n: s["addressType"] for n, s in by_name.items()} == {
        f"{name}-ipv4": "IPv4",
        f"{name}-ipv6": "IPv6",
    }
    for s in by_name.values():
        assert s["metadata"]["labels"]["kubernetes.io/service-name"] == name
        manager = s["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"]
        assert manager != "endpointslice-controller.k8s.io"
        assert [p["port"] for p in s["ports"]] == [443]
        (ep,) = s["endpoints"]
        c = ep["conditions"]
        assert (c["ready"], c.get("serving", c["ready"]), c.get("terminating", False)) == (
            True,
            True,
            False,
        )
    (policy,) = rendered.policies
    (target,) = policy["spec"]["targetRefs"]
    assert (target["group"], target["kind"], target["name"]) == ("", "Service", name)
    assert policy["spec"]["validation"]["hostname"] == "svc.prod.cloud-a.example"
    assert policy["spec"]["validation"]["wellKnownCACertificates"] == "System"


def test_publish_gateway_backend_updates_addresses_and_prunes_stale_family() -> None:
    """gatewayapi_test.go::TestPublish_GatewayBackendUpdatesAddressesAndPrunesStaleFamily:
    when the workload Gateway stops advertising IPv4, only the IPv6 slice is published,
    with the new address."""
    opts = replace(SLICES, addresses={"cluster-a": ("2001:db8::20",)})
    rendered = render(tmap(("cluster-a", "svc.prod.cloud-a.example", 1)), opts)
    (s,) = rendered.endpoint_slices
    assert s["metadata"]["name"].endswith("-ipv6")
    assert [e["addresses"] for e in s["endpoints"]] == [["2001:db8::20"]]


def test_publish_gateway_backend_requires_addresses() -> None:
    """gatewayapi_test.go::TestPublish_GatewayBackendRequiresAddressResolver: EndpointSlice
    backends without an address fail before anything is published (ApplyFailed)."""
    opts = replace(SLICES, addresses={})
    with pytest.raises(PlanRefused) as refused:
        render(tmap(("cluster-a", "svc.prod.cloud-a.example", 1)), opts)
    assert refused.value.outcome is PublishOutcome.APPLY_FAILED


@pytest.mark.parametrize(
    "upstream",
    [
        "TestPublish_ExternalNameTLSDoesNotRequireAddressResolver",
        "TestPublish_DisablingEndpointSlicesKeepsExternalNameTLSRouting",
    ],
)
def test_publish_external_name_tls_routing(upstream: str) -> None:
    """gatewayapi_test.go::TestPublish_ExternalNameTLSDoesNotRequireAddressResolver and
    ::TestPublish_DisablingEndpointSlicesKeepsExternalNameTLSRouting: with ExternalName
    backends no address is needed, no EndpointSlice is published, and backend TLS and the
    hostname rewrite stay configured."""
    opts = replace(SLICES, backend_type="ExternalName", addresses={})
    rendered = render(tmap(("cluster-a", "svc.prod.cloud-a.example", 1)), opts)
    assert rendered.endpoint_slices == [] and len(rendered.policies) == 1
    (ref,) = refs(rendered.route)
    assert len(ref["filters"]) == 1


def test_publish_multi_home_creates_per_home_services() -> None:
    """gatewayapi_test.go::TestPublish_MultiHomeCreatesPerHomeServices."""
    rendered = render(tmap(("cluster-a", "a.example", 1), ("cluster-b", "b.example", 1)), BASE)
    assert [s["spec"]["externalName"] for s in rendered.services] == ["a.example", "b.example"]
    assert len(refs(rendered.route)) == 2


def test_publish_idempotent(tmp_path: Path) -> None:
    """gatewayapi_test.go::TestPublish_Idempotent: an identical re-publish does not touch
    the route."""
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    run(rec)
    first = route_file(tmp_path).stat()
    run(rec)
    again = route_file(tmp_path).stat()
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)


def test_publish_home_leaves_gcs_stale_service(tmp_path: Path) -> None:
    """gatewayapi_test.go::TestPublish_HomeLeavesGCsStaleService: when a home leaves, its
    Service and backendRef go and the other home's stay."""
    data = seed()
    rec = Reconciler(write(tmp_path, data), clock=Clock())
    run(rec)
    data["services"][0]["homes"].pop()
    write(tmp_path, data)
    run(rec)
    route, *services = route_docs(tmp_path)
    assert [s["spec"]["externalName"] for s in services] == [
        "llama-chat.llama-demo.cluster-a.example.com"
    ]
    assert [r["name"] for r in refs(route)] == [backend_name(NS, SVC, "cluster-a")]


def test_publish_winner_moves_clusters_in_single(tmp_path: Path) -> None:
    """gatewayapi_test.go::TestPublish_WinnerMovesClustersInSingle: a Single service moved
    from cluster-a to cluster-b is published with cluster-b's Service only."""
    data = seed()
    data["services"][0]["mode"] = "Single"
    b = data["services"][0]["homes"].pop()
    rec = Reconciler(write(tmp_path, data), clock=Clock())
    run(rec)
    data["services"][0]["homes"] = [b]
    write(tmp_path, data)
    run(rec)
    route, *services = route_docs(tmp_path)
    assert [s["spec"]["externalName"] for s in services] == [
        "llama-chat.llama-demo.cluster-b.example.com"
    ]
    assert [r["name"] for r in refs(route)] == [backend_name(NS, SVC, "cluster-b")]
