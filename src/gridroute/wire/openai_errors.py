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
REQUEST_TIMEOUT: Final = error_body(
    "the request's headers or body did not arrive in time", "invalid_request_error", "timeout"
)
"""408 and close: `listener.header_timeout_s` or `listener.body_timeout_s` ran out."""
TOO_MANY_CONNECTIONS: Final = error_body(
    "this server holds as many connections as it accepts; retry later",
    "server_error",
    "too_many_connections",
)
"""503 and close: `listener.max_connections` are open."""
BAD_REQUEST: Final = error_body(
    "the request is not valid HTTP/1.1", "invalid_request_error", "bad_request"
)
"""400 and close: the request line or headers did not parse."""
HEADERS_TOO_LARGE: Final = error_body(
    "the request's headers are too many or too large",
    "invalid_request_error",
    "request_header_fields_too_large",
)
"""431 and close: more headers, or a longer header, than the listener accepts."""
JSON_TOO_DEEP: Final = error_body(
    "the request body is JSON nested deeper than this gateway parses",
    "invalid_request_error",
    "invalid_json",
)
"""400: the body's JSON nests too deeply to parse (a RecursionError)."""
INTERNAL: Final = error_body("the server failed on this request", "server_error", "internal_error")
"""500: a bug; the traceback goes to the (rate-limited) log, never to the client."""
UNAUTHORIZED: Final = error_body(
    "incorrect or missing API key", "invalid_request_error", "invalid_api_key"
)
"""401: `auth.api_keys_file` is set and the bearer key is not one of its keys."""
FORBIDDEN_PEER: Final = error_body(
    "this client's certificate identity may not read this server",
    "invalid_request_error",
    "forbidden",
)
"""403: a peer whose certificate is outside the trust domain or the allow-list."""


def not_found(path: str) -> bytes:
    """404 for a path no route serves (the path is echoed, truncated)."""
    return error_body(f"no route for {path[:200]}", "invalid_request_error", "unknown_url")


def method_not_allowed(method: str, path: str) -> bytes:
    """405 for a known path asked with the wrong method (OpenAI answers the same)."""
    return error_body(
        f"{method[:16]} is not allowed on {path[:200]}",
        "invalid_request_error",
        "method_not_supported",
    )


def model_not_found(model: str) -> bytes:
    """404 of `GET /v1/models/{id}` for a model this gateway does not serve now."""
    return error_body(
        f"the model {model[:200]!r} does not exist or no site serves it now",
        "invalid_request_error",
        "model_not_found",
        "model",
    )
