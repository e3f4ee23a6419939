"""core/ is pure: it imports nothing that does I/O, nor the layers built on top of it."""

import ast
from pathlib import Path

import gridroute.core

FORBIDDEN = {
    "asyncio",
    "aiohttp",
    "socket",
    "ssl",
    "time",
    "prometheus_client",
    "kubernetes",
    "gridroute.gateway",
    "gridroute.operator",
    "gridroute.control",
    "gridroute.sim",
    "gridroute.fakeserver",
    "gridroute.grid",
    "gridroute.demo",
    "gridroute.load",
    "gridroute.relay",
    "gridroute.cli",
    "gridroute.config",
    "gridroute.wire",
}


def test_core_imports_no_io_and_no_upper_layer() -> None:
    root = Path(gridroute.core.__file__).parent
    offenders = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if any(name == f or name.startswith(f + ".") for f in FORBIDDEN):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_core_never_uses_the_global_random_source() -> None:
    root = Path(gridroute.core.__file__).parent
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "random.random(" not in text and "import random\n" not in text, path.name
