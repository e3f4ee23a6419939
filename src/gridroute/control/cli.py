"""`gridroute trafficmap ...` and `gridroute traffic drain|undrain`.

Importing this module stays cheap (every `gridroute` verb imports it): the control plane
is imported by the command that runs. The state lives in the directory store (embedded,
no server): name it with `--store DIR`, or with `--config control.yaml` (its `store:`),
or set GRIDROUTE_STORE; a `control.yaml` in the working directory is used when nothing
is given.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

if TYPE_CHECKING:
    from gridroute.control.reconcile import PassResult
    from gridroute.control.store import Store
    from gridroute.core.trafficmap import Drain
    from gridroute.wire.trafficmap import TrafficMap

STORE_ENV = "GRIDROUTE_STORE"

trafficmap_app = typer.Typer(
    no_args_is_help=True, help="TrafficMaps: per-cluster weights, published as HTTPRoutes."
)
traffic_app = typer.Typer(no_args_is_help=True, help="Hold a workload cluster at weight 0.")


class Output(StrEnum):
    table = "table"
    wide = "wide"
    yaml = "yaml"
    json = "json"


StoreOpt = Annotated[
    Path | None, typer.Option("--store", help="State directory (default: GRIDROUTE_STORE).")
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="control.yaml whose store to read.")
]
NamespaceOpt = Annotated[str | None, typer.Option("--namespace", "-n", help="Only this namespace.")]
ServiceOpt = Annotated[str | None, typer.Option("--service", "-s", help="Only this service.")]
IdOpt = Annotated[str | None, typer.Option("--id", help="Drain ID (default <cluster>-drain).")]


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def _store(store: Path | None, config: Path | None) -> Store:
    from gridroute.control.config import ControlConfigError, load
    from gridroute.control.store import Store

    if store is not None:
        return Store(store)
    if config is None and os.environ.get(STORE_ENV):
        return Store(Path(os.environ[STORE_ENV]))
    path = config or Path("control.yaml")
    if config is None and not path.exists():
        raise _fail("no store: give --store DIR or --config control.yaml (or GRIDROUTE_STORE)", 2)
    from gridroute.control.store import StoreError
    from gridroute.control.store_kubernetes import StoreOpener

    try:
        return StoreOpener()(load(path))
    except (ControlConfigError, StoreError) as exc:
        raise _fail(str(exc), 2) from None


def _maps(store: Path | None, config: Path | None) -> list[TrafficMap]:
    """Every stored map; a store that cannot be reached exits 2 with why."""
    from gridroute.control.store import StoreError

    try:
        return _store(store, config).maps()
    except StoreError as exc:
        raise _fail(str(exc), 2) from None


@trafficmap_app.command("get")
def get(
    name: Annotated[str | None, typer.Argument(help="One map (default: every map).")] = None,
    output: Annotated[Output, typer.Option("--output", "-o")] = Output.table,
    namespace: NamespaceOpt = None,
    store: StoreOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List maps: mode, Published, Routable, OverrideActive, reason, entries, weights, age."""
    from gridroute.control.mapview import COLUMNS, WIDE, row, table_text

    maps = [
        m
        for m in _maps(store, config)
        if (name is None or m.metadata.name == name)
        and (namespace is None or m.metadata.namespace == namespace)
    ]
    if name is not None and not maps:
        raise _fail(f'trafficmap "{name}" not found')
    if output in (Output.yaml, Output.json):
        objs = [m.wire() for m in maps]
        doc = objs[0] if name is not None and len(objs) == 1 else {
            "apiVersion": "v1", "kind": "List", "items": objs}  # fmt: skip
        if output is Output.json:
            typer.echo(json.dumps(doc, indent=2))
        else:
            typer.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        return
    if not maps:
        typer.echo("No resources found.")
        return
    wide = output is Output.wide
    head = COLUMNS + (WIDE if wide else [])
    rows = [head] + [row(m, time.time(), wide) for m in maps]
    if namespace is None:
        rows = [["NAMESPACE", *head]] + [
            [m.metadata.namespace, *r] for m, r in zip(maps, rows[1:], strict=True)
        ]
    typer.echo(table_text(rows), nl=False)


@trafficmap_app.command("describe")
def describe_command(
    name: Annotated[str, typer.Argument(help="The map (the service's name).")],
    namespace: NamespaceOpt = None,
    store: StoreOpt = None,
    config: ConfigOpt = None,
) -> None:
    """A map's entries (with why a weight is 0) and its conditions with messages."""
    from gridroute.control.mapview import describe

    maps = [
        m
        for m in _maps(store, config)
        if m.metadata.name == name and namespace in (None, m.metadata.namespace)
    ]
    if not maps:
        raise _fail(f'trafficmap "{name}" not found')
    typer.echo("\n".join(describe(m, time.time()) for m in maps), nl=False)


def _print_pass(result: PassResult) -> None:
    from gridroute.core.trafficmap_publication import PublishOutcome

    for err in result.errors:
        typer.echo(err, err=True)
    for s in result.services:
        weights = " ".join(f"{c}={w}" for c, w in s.weights.items()) or "(no entries)"
        where = f" -> {s.route}" if s.route is not None else ""
        note = f" ({s.message})" if s.message and s.outcome is not PublishOutcome.PUBLISHED else ""
        typer.echo(f"{s.namespace}/{s.name}: {s.outcome.value} {weights}{where}{note}")


@trafficmap_app.command("reconcile")
def reconcile(
    config: Annotated[Path, typer.Option("--config", "-c", help="control.yaml")],
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
) -> None:
    """Compute every map, publish the routes, store the maps; again every interval."""
    import asyncio

    from gridroute.control.config import ControlConfigError
    from gridroute.control.reconcile import PassResult, Reconciler
    from gridroute.core.trafficmap_publication import PublishOutcome

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        reconciler = Reconciler(config)
    except ControlConfigError as exc:
        raise _fail(str(exc), 2) from None
    if once:
        result = asyncio.run(reconciler.run_once())
        _print_pass(result)
        failed = {PublishOutcome.INVALID_OWNER, PublishOutcome.APPLY_FAILED,
                  PublishOutcome.INVALID_PLAN, PublishOutcome.UNPUBLISH_FAILED}  # fmt: skip
        bad = result.errors or any(s.outcome in failed for s in result.services)
        raise typer.Exit(1 if bad else 0)

    async def forever() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        last: dict[str, str] = {}

        def changed(result: PassResult) -> None:
            for s in result.services:
                line = f"{s.outcome.value} {s.weights}"
                if last.get(f"{s.namespace}/{s.name}") != line:
                    last[f"{s.namespace}/{s.name}"] = line
                    _print_pass(PassResult((s,), ()))
            for err in result.errors:
                typer.echo(err, err=True)

        await reconciler.run(stop, changed)

    asyncio.run(forever())


@trafficmap_app.command("publish")
def publish(
    paths: Annotated[
        list[Path], typer.Argument(help="TrafficMap object files or directories (YAML, JSON).")
    ],
    config: Annotated[
        Path, typer.Option("--config", "-c", help="control.yaml: publishers, store, no services")
    ],
    once: Annotated[bool, typer.Option("--once", help="One pass, then exit.")] = False,
) -> None:
    """Publish maps someone else writes (OME, GitOps) and write their status back."""
    from gridroute.config import ConfigError
    from gridroute.control.map_publisher import MapPublisher
    from gridroute.control.reconcile import PassResult
    from gridroute.core.trafficmap_publication import PublishOutcome

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        publisher = MapPublisher(config, paths)
    except ConfigError as exc:
        raise _fail(str(exc), 2) from None
    failed = {PublishOutcome.INVALID_OWNER, PublishOutcome.APPLY_FAILED,
              PublishOutcome.INVALID_PLAN, PublishOutcome.UNPUBLISH_FAILED}  # fmt: skip
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    last: dict[str, str] = {}
    while True:
        results, errors = publisher.run_once()
        for err in errors:
            typer.echo(err, err=True)
        for s in results:
            line = f"{s.outcome.value} {s.weights}"
            if once or last.get(f"{s.namespace}/{s.name}") != line:
                last[f"{s.namespace}/{s.name}"] = line
                _print_pass(PassResult((s,), ()))
        if once:
            bad = errors or any(s.outcome in failed for s in results)
            raise typer.Exit(1 if bad else 0)
        deadline = time.monotonic() + publisher.loaded.config.reconcile_interval_seconds
        while not stop and time.monotonic() < deadline:
            time.sleep(0.05)
        if stop:
            return


@contextlib.contextmanager
def _locked(store: Store) -> Iterator[None]:
    """One drain edit at a time (the reference guards its write by resourceVersion)."""
    store.root.mkdir(parents=True, exist_ok=True)
    with open(store.root / ".drains.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _targets(
    store: Store, cluster: str, service: str | None, namespace: str | None
) -> list[tuple[str, str]]:
    maps = store.maps()
    if service is not None:
        found = [m for m in maps if m.metadata.name == service
                 and namespace in (None, m.metadata.namespace)]  # fmt: skip
        if not found:
            if namespace is None:
                raise _fail(f'trafficmap "{service}" not found; give --namespace for a new one')
            return [(namespace, service)]
        return [(m.metadata.namespace, m.metadata.name) for m in found]
    found = [m for m in maps if any(e.cluster == cluster for e in m.spec.entries)
             and namespace in (None, m.metadata.namespace)]  # fmt: skip
    if not found:
        raise _fail(f"no trafficmap has a home on {cluster}")
    return [(m.metadata.namespace, m.metadata.name) for m in found]


DEFAULT_REASON = "manual drain"
"""The reason a drain gets without `--reason` (an explicit `--reason ""` is refused)."""
_FLAGS = {"id": "--id", "cluster": "CLUSTER", "reason": "--reason"}


def _checked_request(ident: str, cluster: str, reason: str, default_id: bool) -> None:
    """Refuse a drain the record may not hold, naming the flag (OME's request rules); a
    reason is not echoed (it may be a secret)."""
    from gridroute.core.trafficmap import Drain
    from gridroute.wire.drains import request_problem

    problem = request_problem(Drain(ident, cluster, reason))
    if problem is None:
        return
    field, why = problem
    if field == "reason":
        raise _fail(f"--reason: {why}")
    value = ident if field == "id" else cluster
    hint = ""
    if field == "id" and default_id:
        hint = " (the default <cluster>-drain; give --id)"
    elif field == "cluster":
        hint = " (control.yaml's cluster names are DNS labels too)"
    raise _fail(f"{_FLAGS[field]} {value!r}: {why}{hint}")


def _read_checked(st: Store, ns: str, svc: str) -> tuple[Drain, ...]:
    """The service's drains, each checked as a new one would be: a record the command could
    not have written is left for a person to fix (the reference fails closed)."""
    from gridroute.wire.drains import DrainError, request_problem

    try:
        drains = st.read_drains(ns, svc)
    except DrainError as exc:
        raise _fail(f"{ns}/{svc}: {exc}; fix or remove {st.drain_path(ns, svc)}") from None
    for d in drains:
        problem = request_problem(d, stored=True)
        if problem is not None:
            which = "an existing drain's" if problem[0] == "id" else f"existing drain {d.id!r}:"
            raise _fail(
                f"{ns}/{svc}: {which} {problem[0]} {problem[1]}; "
                f"fix or remove it in {st.drain_path(ns, svc)}"
            )
    return drains


@traffic_app.command("drain")
def drain(
    cluster: Annotated[str, typer.Argument(help="Workload cluster to hold at weight 0.")],
    service: ServiceOpt = None,
    namespace: NamespaceOpt = None,
    drain_id: IdOpt = None,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help=f"Why, for the map's readers (default {DEFAULT_REASON!r})."),
    ] = None,
    store: StoreOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Hold CLUSTER at weight 0 for one service or every service homed there.

    The drain ID must be new in each record (undrain it first to change it); the ID and
    CLUSTER are DNS labels, the reason non-empty trimmed text of at most 256 bytes without
    control characters, and none of them may look like a secret."""
    from gridroute.core.trafficmap import Drain
    from gridroute.wire.drains import DrainError, encode_drains, parse_drains

    ident = f"{cluster}-drain" if drain_id is None else drain_id
    why = DEFAULT_REASON if reason is None else reason
    _checked_request(ident, cluster, why, default_id=drain_id is None)
    st = _store(store, config)
    with _locked(st):
        planned = []
        for ns, svc in _targets(st, cluster, service, namespace):
            drains = _read_checked(st, ns, svc)
            same = next((d for d in drains if d.id == ident), None)
            if same is not None:
                raise _fail(
                    f"{ns}/{svc}: --id {ident!r} already exists (it drains {same.cluster}); "
                    "undrain it first or give another --id"
                )
            new = (*drains, Drain(ident, cluster, why))
            try:
                parse_drains(encode_drains(new))  # refuse what the reconciler would refuse
            except DrainError as exc:
                raise _fail(f"{ns}/{svc}: {exc}") from None
            planned.append((ns, svc, new))
        for ns, svc, new in planned:  # all or nothing
            st.write_drains(ns, svc, new)
            typer.echo(f"{ns}/{svc}: {ident} drains {cluster}; the next pass sets its weight to 0")


@traffic_app.command("undrain")
def undrain(
    cluster: Annotated[str, typer.Argument(help="Workload cluster to release.")],
    service: ServiceOpt = None,
    namespace: NamespaceOpt = None,
    drain_id: Annotated[str | None, typer.Option("--id", help="Remove only this ID.")] = None,
    store: StoreOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Remove the drains that hold CLUSTER (or only --id); other drains stay."""
    _checked_request("x" if drain_id is None else drain_id, cluster, "x", default_id=False)
    st = _store(store, config)
    with _locked(st):
        planned = []
        for ns, svc in _targets(st, cluster, service, namespace):
            drains = _read_checked(st, ns, svc)
            keep = tuple(
                d for d in drains
                if d.cluster != cluster or (drain_id is not None and d.id != drain_id)
            )  # fmt: skip
            planned.append((ns, svc, drains, keep))
        if not any(len(drains) > len(keep) for _, _, drains, keep in planned):
            if drain_id is not None:
                raise _fail(f"no drain {drain_id!r} holds {cluster}")
            raise _fail(f"no drain holds {cluster}")
        for ns, svc, drains, keep in planned:
            if len(keep) < len(drains):
                st.write_drains(ns, svc, keep)
            typer.echo(f"{ns}/{svc}: {len(drains) - len(keep)} drain(s) of {cluster} removed")


@trafficmap_app.command("demo")
def demo(
    period: Annotated[float, typer.Option(help="Probe and reconcile period, seconds.")] = 0.5,
    step_timeout: Annotated[float, typer.Option(help="Longest wait for a step, seconds.")] = 20.0,
) -> None:
    """A live map over local operators: drain, undrain, probe down, restore."""
    from gridroute.demo.trafficmap import run_trafficmap_demo

    raise typer.Exit(run_trafficmap_demo(period, step_timeout))
