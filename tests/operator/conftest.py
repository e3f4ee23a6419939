"""The session's certificates: one CA for hub, west and east, and a foreign CA."""

from __future__ import annotations

import pytest
from operator_fixtures import SITES, Certs

from gridroute.operator.certs import init_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    root = tmp_path_factory.mktemp("certs")
    foreign = tmp_path_factory.mktemp("foreign")
    init_certs(root, SITES)
    init_certs(foreign, SITES)  # same names, another CA
    return Certs(root, foreign)
