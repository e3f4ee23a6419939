"""Structured logs: GRIDROUTE_LOG_FORMAT=json gives one JSON object per event line."""

import json
import logging

from gridroute.logs import JsonFormatter


def test_json_lines_carry_the_event_fields() -> None:
    record = logging.LogRecord(
        "gridroute.gateway",
        logging.WARNING,
        "f.py",
        1,
        "model %s: %s -> %s",
        ("m", "routed", "shed"),
        None,
    )
    record.event = "refusal_transition"
    record.model = "m"
    doc = json.loads(JsonFormatter().format(record))
    assert doc["msg"] == "model m: routed -> shed"
    assert doc["level"] == "warning" and doc["logger"] == "gridroute.gateway"
    assert doc["event"] == "refusal_transition" and doc["model"] == "m"
    assert "args" not in doc and "lineno" not in doc
