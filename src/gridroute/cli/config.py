"""`gridroute config check FILE` and `gridroute config schema [KIND]`, for every kind.

`check` recognises what a file is (gateway, operator, scenario, control or a routing
overlay) from its top-level keys, or a TrafficMap object file or directory from its
documents' `kind`, validates it with that kind's model through the one loader in
`gridroute.config`, and checks that every file it names exists and is readable, so a
process started later does not die on the first missing certificate. With `--offline`
(a config written for another machine) those files are not opened: each path is only
checked to look like a file's path, and the summary names the fields left unopened.
An overlay (JSON
or YAML) is checked as a gateway would check it on reload, less the gateway's own
backends (`gridroute overlay check FILE --gateway CONFIG` adds those). It lives above
the process packages because it knows every kind of file they read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel

from gridroute.config import ConfigError, check_paths, read_mapping

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Config files of every kind: schemas and checks.",
)


@dataclass(frozen=True)
class Kind:
    """One kind of config file: its model, its loader, a one-line summary and the files
    a loaded one names (field -> path).

    `load(path, files)` opens every file the config names when `files` is true, and
    none when it is false (`--offline`); `files(path, loaded)` lists them for the
    offline shape check and summary."""

    name: str
    model: Callable[[], type[BaseModel]]
    load: Callable[[Path, bool], Any]
    summary: Callable[[Any], str]
    files: Callable[[Path, Any], Mapping[str, str | Path | None]]


def _no_files(path: Path, loaded: Any) -> dict[str, str | Path | None]:
    """Overlays and TrafficMaps name no other file."""
    return {}


def _gateway_model() -> type[BaseModel]:
    from gridroute.gateway.config import GatewayConfig

    return GatewayConfig


def _gateway_load(path: Path, files: bool) -> Any:
    from gridroute.gateway.config import load_config

    return load_config(path, files=files)


def _gateway_files(path: Path, cfg: Any) -> dict[str, str | Path | None]:
    from gridroute.gateway.config import named_files

    overlay = {"overlay.file": cfg.overlay.file} if cfg.overlay is not None else {}
    return {**named_files(cfg), **overlay}


def _gateway_summary(cfg: Any) -> str:
    sites = ", ".join(s.key for s in cfg.sites)
    return f"gateway config, {len(cfg.models)} models, sites {sites}"


def _operator_model() -> type[BaseModel]:
    from gridroute.operator.config import OperatorConfig

    return OperatorConfig


def _operator_load(path: Path, files: bool) -> Any:
    from gridroute.operator.config import load_config

    return load_config(path, files=files)


def _operator_files(path: Path, cfg: Any) -> dict[str, str | Path | None]:
    from gridroute.operator.config import named_files

    return dict(named_files(cfg))


def _operator_summary(cfg: Any) -> str:
    return (
        f"operator config, site {cfg.site}, {len(cfg.providers)} providers, {len(cfg.peers)} peers"
    )


def _scenario_model() -> type[BaseModel]:
    from gridroute.sim.scenario import Scenario

    return Scenario


def _scenario_load(path: Path, files: bool) -> Any:
    from gridroute.sim.scenario import load_scenario

    return load_scenario(path, files=files)


def _scenario_files(path: Path, sc: Any) -> dict[str, str | Path | None]:
    from gridroute.sim.scenario import named_files

    return dict(named_files(read_mapping(path)))


def _scenario_summary(sc: Any) -> str:
    return f"scenario {sc.name!r}, {len(sc.sites)} sites, {sc.duration_s:g} s"


def _control_model() -> type[BaseModel]:
    from gridroute.control.config import ControlConfig

    return ControlConfig


def _control_load(path: Path, files: bool) -> Any:
    from gridroute.control.config import check

    return check(path, files=files)


def _control_files(path: Path, loaded: Any) -> dict[str, str | Path | None]:
    from gridroute.control.config import named_files

    return dict(named_files(loaded))


def _control_summary(loaded: Any) -> str:
    return f"control config, {len(loaded.services)} services"


def _overlay_model() -> type[BaseModel]:
    from gridroute.wire.overlay import Overlay

    return Overlay


def _overlay_load(path: Path, files: bool) -> Any:
    from gridroute.config import read_text
    from gridroute.wire.overlay import parse_overlay

    return parse_overlay(read_text(path), str(path))


def _overlay_summary(overlay: Any) -> str:
    from gridroute.wire.overlay import digest

    models = "; ".join(
        f"{cap.model}: picker {cap.picker.value}, "
        f"{len({c.selection_group for c in cap.candidates})} groups"
        for cap in overlay.models
    )
    return (
        f"routing overlay, revision {overlay.revision}, digest {digest(overlay)[:12]}, "
        f"{len(overlay.models)} models{': ' + models if models else ''}"
    )


def _overlay_shaped(data: dict[str, Any]) -> bool:
    """An overlay and a gateway config both have `models`: an overlay's entries name a
    `model` (and its `candidates`), a gateway's a `name`."""
    models = data.get("models")
    if not isinstance(models, list) or not models:
        return False
    return all(isinstance(m, dict) and "model" in m and "name" not in m for m in models)


def _trafficmap_model() -> type[BaseModel]:
    from gridroute.wire.trafficmap import TrafficMap

    return TrafficMap


def _trafficmap_load(path: Path, files: bool) -> Any:
    from gridroute.control.map_objects import check

    return check([path])


def _trafficmap_summary(read: Any) -> str:
    names = ", ".join(f"{ns}/{name}" for ns, name in (m.key for m in read.maps))
    return f"{len(read.maps)} TrafficMap object(s): {names}"


def holds_trafficmaps(path: Path) -> bool:
    """A directory (of map objects), or a file with a TrafficMap document (or a List of
    them): Kubernetes objects, possibly several YAML documents, which `detect`'s one
    mapping cannot describe."""
    if path.is_dir():
        return True
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            doc = next(iter(doc.get("items") or []), None)
        if isinstance(doc, dict) and doc.get("kind") == "TrafficMap":
            return True
    return False


KINDS: dict[str, Kind] = {
    "gateway": Kind("gateway", _gateway_model, _gateway_load, _gateway_summary, _gateway_files),
    "operator": Kind(
        "operator", _operator_model, _operator_load, _operator_summary, _operator_files
    ),
    "scenario": Kind(
        "scenario", _scenario_model, _scenario_load, _scenario_summary, _scenario_files
    ),
    "control": Kind("control", _control_model, _control_load, _control_summary, _control_files),
    "overlay": Kind("overlay", _overlay_model, _overlay_load, _overlay_summary, _no_files),
    "trafficmap": Kind(
        "trafficmap", _trafficmap_model, _trafficmap_load, _trafficmap_summary, _no_files
    ),
}


def _keys(model: type[BaseModel]) -> set[str]:
    keys = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
    return keys


def detect(data: dict[str, Any]) -> str | None:
    """The kind whose model knows the most of the file's top-level keys (None: no match).

    Ties go to the kind with fewer unknown keys; a file whose keys no kind knows is
    not guessed at. `models` entries that name a `model` make it an overlay.
    """
    if _overlay_shaped(data):  # even with a mistyped top-level key: say what is wrong there
        return "overlay"
    best: tuple[int, int, str] | None = None
    for name, kind in KINDS.items():
        known = _keys(kind.model())
        hits = sum(1 for k in data if k in known)
        misses = len(data) - hits
        if hits and (best is None or (hits, -misses) > (best[0], best[1])):
            best = (hits, -misses, name)
    return None if best is None else best[2]


@app.command("check")
def check(
    file: Annotated[
        Path,
        typer.Argument(
            help="A gateway, operator, scenario, control or overlay file, or TrafficMaps."
        ),
    ],
    kind: Annotated[
        str | None,
        typer.Option(help=f"{', '.join(KINDS)} (default: recognised from the keys)."),
    ] = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="For a config written for another machine: check its schema and values "
            "but open none of the files it names (certificates, keys, token, overlay "
            "files); each such path is only checked to look like a file's path. "
            "Default: every named file must exist, be readable and load.",
        ),
    ] = False,
) -> None:
    """Validate a config file of any kind; name the field of every error (exit status 2)."""
    try:
        if kind is None and holds_trafficmaps(file):
            kind = "trafficmap"
        if kind is None:
            kind = detect(read_mapping(file))
            if kind is None:
                raise ConfigError.one(
                    str(file),
                    "(top level)",
                    f"not a {', '.join(KINDS)} file (no known keys); pass --kind to say which",
                )
        if kind not in KINDS:
            typer.echo(f"--kind: one of {', '.join(KINDS)}, got {kind!r}", err=True)
            raise typer.Exit(2)
        loaded = KINDS[kind].load(file, not offline)
        named = {f: p for f, p in KINDS[kind].files(file, loaded).items() if p is not None}
        if offline:
            check_paths(str(file), named)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    summary = KINDS[kind].summary(loaded)
    if offline and named:
        summary += f"; offline, not opened: {', '.join(named)}"
    typer.echo(f"{file}: ok ({summary})")


@app.command("schema")
def schema(
    kind: Annotated[str, typer.Argument(help=", ".join(KINDS) + ".")] = "gateway",
) -> None:
    """Print the JSON Schema of one kind of config file."""
    if kind not in KINDS:
        typer.echo(f"KIND: one of {', '.join(KINDS)}, got {kind!r}", err=True)
        raise typer.Exit(2)
    typer.echo(json.dumps(KINDS[kind].model().model_json_schema(), indent=2))
