"""The Dockerfile the chart's image is built from: hadolint finds nothing, it is
multi-stage on a pinned base, runs `gridroute` as the chart's non-root user, and says
the version the chart and the package say. (It is not built here: no registry of base
images is reachable.)"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
CHART = ROOT / "deploy" / "kubernetes" / "gridroute"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sys.prefix) / "bin" / "hadolint"
    done = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_it_is_multi_stage_on_a_pinned_base() -> None:
    ins = instructions()
    (arg,) = [rest for word, rest in ins if word == "ARG" and rest.startswith("PYTHON_IMAGE=")]
    base = arg.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base
    froms = [rest for word, rest in ins if word == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    assert any(w == "COPY" and r.startswith("--from=build ") for w, r in ins)


def test_it_runs_gridroute_as_the_charts_non_root_user() -> None:
    ins = instructions()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    pod = values["podSecurityContext"]
    user = [rest for word, rest in ins if word == "USER"][-1]
    assert user == f"{pod['runAsUser']}:{pod['runAsGroup']}" and pod["runAsUser"] != 0
    assert [rest for word, rest in ins if word == "ENTRYPOINT"] == ['["gridroute"]']
    exposed = {int(p) for word, rest in ins if word == "EXPOSE" for p in rest.split()}
    assert exposed == {values["gateway"]["port"], values["gateway"]["metricsPort"],
                       values["operator"]["port"]}  # fmt: skip


def test_the_image_chart_and_package_say_one_version() -> None:
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', DOCKERFILE.read_text())
    assert label is not None
    assert chart["appVersion"] == label[1] == package
