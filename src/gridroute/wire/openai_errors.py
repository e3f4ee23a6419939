"""OpenAI-shaped error bodies: `{"error": {"message", "type", "code"}}`.

Clients (the official SDKs included) branch on `type` and `code`, so these strings
are API. The bodies the gateway answers on its hot paths are encoded once here.
"""

from __future__ import annotations

import json
from typing import Final

CONTENT_TYPE: Final = "application/json"


def error_body(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    """Encode one error body (`param` is included when set, as OpenAI does)."""
    err: dict[str, str | None] = {"message": message, "type": type_, "code": code}
    if param is not None:
        err["param"] = param
    return json.dumps({"error": err}, separators=(",", ":")).encode()


SHED: Final = error_body(
    "every site serving this model is at capacity", "rate_limit_exceeded", "capacity_exhausted"
)
"""429 with Retry-After: the model is shed (seed PR, "Errors")."""
NO_HEALTHY_SITE: Final = error_body(
    "no healthy site serves this model now", "server_error", "no_healthy_site"
)
"""503 with Retry-After: the model is known but no site can take it."""
MODEL_NOT_FOUND: Final = error_body(
    "no site serves this model", "invalid_request_error", "model_not_found"
)
"""404: no configured site serves the model."""
MISSING_MODEL: Final = error_body(
    "the request body must be a JSON object with a string 'model'",
    "invalid_request_error",
    "missing_model",
    "model",
)
"""400: the body has no model to route on."""
INVALID_JSON: Final = error_body(
    "the request body is not valid JSON", "invalid_request_error", "invalid_json"
)
"""400: the body is missing or is not JSON."""
TOO_LARGE: Final = error_body(
    "the request body is larger than this gateway accepts",
    "invalid_request_error",
    "request_too_large",
)
"""413: the body is over `limits.max_body_bytes`."""
UPSTREAM_FAILED: Final = error_body(
    "the site chosen for this request could not be reached", "server_error", "upstream_unreachable"
)
"""502: every attempt failed before the backend answered."""
UPSTREAM_TIMEOUT: Final = error_body(
    "the site chosen for this request did not answer in time", "server_error", "upstream_timeout"
)
"""504: the backend accepted the request but sent no answer in time."""
SHUTTING_DOWN: Final = error_body("this gateway is shutting down", "server_error", "shutting_down")
"""503: a request that arrived while the gateway drains."""
