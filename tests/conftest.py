"""Session fixtures shared by test directories."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.prometheus_package import PrometheusBinaries, binaries


@pytest.fixture(scope="session")
def prometheus_binaries() -> PrometheusBinaries:
    """`prometheus` and `promtool` from Debian's package (installed when root), or skip."""
    return binaries()


@pytest.fixture(params=["aiohttp", "dataplane", "spliced"])
def each_listener(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test once per API listener (`running_grid` reads the choice); `spliced`
    is the data plane with a kept-alive connection waiting in every backend's pool, so
    a request's first attempt is carried out in callbacks (`dataplane/splice.py`)
    rather than in the task that connects."""
    from tests.gateway import harness

    before = harness.listener_kind
    harness.listener_kind = request.param
    try:
        yield request.param
    finally:
        harness.listener_kind = before
