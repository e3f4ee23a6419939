"""The one thing the gateway reads of a request body: its `model`. Pure, so it is fuzzed.

Any bytes in, either the model name or the reason there is none (`Kind`) and the
OpenAI-shaped error body out. Never raises: a RecursionError from JSON nested deeper
than the C scanner recurses is a client error, not a 500 with a traceback.
"""

from __future__ import annotations

import json

from gridroute.inbound.client_errors import Kind
from gridroute.wire import openai_errors as errs


def parse_model(body: bytes) -> str | tuple[Kind, bytes]:
    """The body's string `model`, or (kind, 400 error body)."""
    try:
        doc = json.loads(body)
    except ValueError:  # UnicodeDecodeError (invalid UTF-8) included
        return Kind.INVALID_JSON, errs.INVALID_JSON
    except RecursionError:
        return Kind.INVALID_JSON, errs.JSON_TOO_DEEP
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, str) or not model:
        return Kind.MISSING_MODEL, errs.MISSING_MODEL
    return model
