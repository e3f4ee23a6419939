"""Session fixtures shared by test directories."""

from __future__ import annotations

import pytest

from tests.prometheus_package import PrometheusBinaries, binaries


@pytest.fixture(scope="session")
def prometheus_binaries() -> PrometheusBinaries:
    """`prometheus` and `promtool` from Debian's package (installed when root), or skip."""
    return binaries()
