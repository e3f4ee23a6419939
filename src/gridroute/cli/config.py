"""`gridroute config check FILE` and `gridroute config schema [KIND]`, for every kind.

`check` recognises what a file is (gateway, operator, scenario, control or a routing
overlay) from its top-level keys, or a TrafficMap object file or directory from its
documents' `kind`, validates it with that kind's model through the one loader in
`gridroute.config`, and checks that every file it names exists and is readable, so a
process started later does not die on the first missing certificate. An overlay (JSON
or YAML) is checked as a gateway would check it on reload, less the gateway's own
backends (`gridroute overlay check FILE --gateway CONFIG` adds those). It lives above
the process packages because it knows every kind of file they read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel

from gridroute.config import ConfigError, read_mapping

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Config files of every kind: schemas and checks.",
)


@dataclass(frozen=True)
class Kind:
    """One kind of config file: its model, its loader and a one-line summary."""

    name: str
    model: Callable[[], type[BaseModel]]
    load: Callable[[Path], Any]
    summary: Callable[[Any], str]


def _gateway_model() -> type[BaseModel]:
    from gridroute.gateway.config import GatewayConfig

    return GatewayConfig


def _gateway_load(path: Path) -> Any:
    from gridroute.gateway.config import load_config

    return load_config(path)


def _gateway_summary(cfg: Any) -> str:
    sites = ", ".join(s.key for s in cfg.sites)
    return f"gateway config, {len(cfg.models)} models, sites {sites}"


def _operator_model() -> type[BaseModel]:
    from gridroute.operator.config import OperatorConfig

    return OperatorConfig


def _operator_load(path: Path) -> Any:
    from gridroute.operator.config import load_config

    return load_config(path)


def _operator_summary(cfg: Any) -> str:
    return (
        f"operator config, site {cfg.site}, {len(cfg.providers)} providers, {len(cfg.peers)} peers"
    )


def _scenario_model() -> type[BaseModel]:
    from gridroute.sim.scenario import Scenario

    return Scenario


def _scenario_load(path: Path) -> Any:
    from gridroute.sim.scenario import load_scenario

    return load_scenario(path)


def _scenario_summary(sc: Any) -> str:
    return f"scenario {sc.name!r}, {len(sc.sites)} sites, {sc.duration_s:g} s"


def _control_model() -> type[BaseModel]:
    from gridroute.control.config import ControlConfig

    return ControlConfig


def _control_load(path: Path) -> Any:
    from gridroute.control.config import check

    return check(path)


def _control_summary(loaded: Any) -> str:
    return f"control config, {len(loaded.services)} services"


def _overlay_model() -> type[BaseModel]:
    from gridroute.wire.overlay import Overlay

    return Overlay


def _overlay_load(path: Path) -> Any:
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


def _trafficmap_load(path: Path) -> Any:
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
    "gateway": Kind("gateway", _gateway_model, _gateway_load, _gateway_summary),
    "operator": Kind("operator", _operator_model, _operator_load, _operator_summary),
    "scenario": Kind("scenario", _scenario_model, _scenario_load, _scenario_summary),
    "control": Kind("control", _control_model, _control_load, _control_summary),
    "overlay": Kind("overlay", _overlay_model, _overlay_load, _overlay_summary),
    "trafficmap": Kind("trafficmap", _trafficmap_model, _trafficmap_load, _trafficmap_summary),
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
        loaded = KINDS[kind].load(file)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{file}: ok ({KINDS[kind].summary(loaded)})")


@app.command("schema")
def schema(
    kind: Annotated[str, typer.Argument(help=", ".join(KINDS) + ".")] = "gateway",
) -> None:
    """Print the JSON Schema of one kind of config file."""
    if kind not in KINDS:
        typer.echo(f"KIND: one of {', '.join(KINDS)}, got {kind!r}", err=True)
        raise typer.Exit(2)
    typer.echo(json.dumps(KINDS[kind].model().model_json_schema(), indent=2))
