"""An atheris (libFuzzer) target for the gateway's request-body parser.

Coverage-guided, so it reaches byte patterns hypothesis's mutations of the corpus
may not. Run by `test_atheris.py` for a bounded number of runs (libFuzzer exits the
process when they are done), or by hand for longer:

    PYTHONPATH=src python tests/fuzz/atheris_request_body.py -runs=200000 CORPUS_COPY

libFuzzer writes new inputs into the first corpus directory it is given, so pass a
copy of tests/fuzz/corpus/requests, not the kept corpus itself.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports():
    from gridroute.gateway.request_body import parse_model
    from gridroute.inbound.client_errors import Kind


def test_one_input(data: bytes) -> None:
    """Any bytes: a non-empty model name, or a documented refusal with a JSON body."""
    got = parse_model(data)
    if isinstance(got, tuple):
        kind, error = got
        if kind not in (Kind.INVALID_JSON, Kind.MISSING_MODEL):
            raise AssertionError(f"unexpected refusal kind {kind}")
        if not error.startswith(b'{"error":'):
            raise AssertionError(f"refusal body is not OpenAI-shaped: {error[:80]!r}")
    elif not (isinstance(got, str) and got):
        raise AssertionError(f"not a model name: {got!r}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
