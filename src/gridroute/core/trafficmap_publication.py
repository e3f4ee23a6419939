"""Published and PublicationFallback: what the publisher says about its last attempt
(seed, "Published"; reference 4.4).

A failing publish keeps the route of the last success and says so with a generic
message (the error itself goes to the log, on a line that reads "TrafficMap publisher
reconciliation failed"). PublicationFallback is False/Unsupported after a success,
Unknown while a publish is failing, and mirrors Withdrawn, Unpublished and Finalizing.
"""

from __future__ import annotations

from enum import Enum

from gridroute.core.trafficmap_conditions import Condition, ConditionType, Status

FAILED_LOG_LINE = "TrafficMap publisher reconciliation failed"


class PublishOutcome(Enum):
    PUBLISHED = "Published"
    WITHDRAWN = "Withdrawn"
    """Deliberate: no global gateway, backend port or hostname is configured."""
    UNPUBLISHED = "Unpublished"
    """Terminal: the service is no longer routed and its route is gone."""
    FINALIZING = "Finalizing"
    """The service is being deleted; the map is held until its route is removed."""
    INVALID_OWNER = "InvalidOwner"
    """The service's spec is invalid (a bad factor, drain or probe): nothing moves."""
    INVALID_OPTIONS = "InvalidOptions"
    INVALID_PLAN = "InvalidPlan"
    """The table cannot be rendered (more than 16 entries)."""
    APPLY_FAILED = "ApplyFailed"
    UNPUBLISH_FAILED = "UnpublishFailed"


_DELIBERATE = {PublishOutcome.WITHDRAWN, PublishOutcome.UNPUBLISHED, PublishOutcome.FINALIZING}

_MESSAGES = {
    PublishOutcome.WITHDRAWN: "publishing is not configured (globalGateway, backendPort and "
    "hostname are all needed); no route is written",
    PublishOutcome.UNPUBLISHED: "the service is no longer routed; its route was removed",
    PublishOutcome.FINALIZING: "the service is being deleted; waiting for its route to be removed",
}


def published(outcome: PublishOutcome, publisher: str) -> Condition:
    """The Published condition for one publish attempt's outcome."""
    kind = ConditionType.PUBLISHED
    if outcome is PublishOutcome.PUBLISHED:
        msg = f'TrafficMap is published by publisher "{publisher}"'
        return Condition(kind, Status.TRUE, outcome.value, msg)
    if outcome in _DELIBERATE:
        return Condition(kind, Status.FALSE, outcome.value, _MESSAGES[outcome])
    msg = (
        f'publisher "{publisher}" could not publish the latest table; the last published '
        f'route stays; see the log line "{FAILED_LOG_LINE}"'
    )
    return Condition(kind, Status.FALSE, outcome.value, msg)


def publication_fallback(outcome: PublishOutcome) -> Condition:
    """PublicationFallback: Unsupported after a success, Unknown while failing."""
    kind = ConditionType.PUBLICATION_FALLBACK
    if outcome is PublishOutcome.PUBLISHED:
        msg = "the built-in publisher published the table; no fallback is used"
        return Condition(kind, Status.FALSE, "Unsupported", msg)
    if outcome in _DELIBERATE:
        return Condition(kind, Status.FALSE, outcome.value, _MESSAGES[outcome])
    msg = "publishing is failing; no fallback publication is configured"
    return Condition(kind, Status.UNKNOWN, outcome.value, msg)
