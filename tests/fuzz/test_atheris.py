"""The request-body parser under atheris (coverage-guided), for a bounded number of
runs. atheris is optional (not in pyproject: its wheels cover only some platforms and
Python versions); without it the test is skipped and says why."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
RUNS = 30_000


def test_request_body_parser_under_atheris(tmp_path: Path) -> None:
    if importlib.util.find_spec("atheris") is None:
        reason = "atheris is not installed (optional: `pip install atheris`)"
        print(f"skipped: {reason}")
        pytest.skip(reason)
    corpus = tmp_path / "corpus"  # libFuzzer adds what it finds: never the kept corpus
    shutil.copytree(HERE / "corpus" / "requests", corpus)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, str(HERE / "atheris_request_body.py"), f"-runs={RUNS}",
         "-max_len=4096", "-rss_limit_mb=1024", f"-artifact_prefix={tmp_path}/", str(corpus)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, tail
    assert f"Done {RUNS} runs" in tail, tail
    assert not list(tmp_path.glob("crash-*")), tail
