"""The overlay publisher: the maps' weights as a routing overlay (docs/overlay.md) that
gridroute's own gateways watch (`overlay: {file: ...}`), split by the `weighted` picker.

Each routed service becomes one capability of the overlay:

    model      the service's `model` in control.yaml (default: its name): what clients
               send in the body's `model`
    group 0    every entry with a positive weight, `new_and_existing`, picker
               `weighted`, `traffic_weight` = the map's weight (scaled into 1..1000
               when the map's weights go above the overlay's range, ratios kept)
    group 1    every entry at weight 0 (drained, gated, unready), `existing_only`: no
               new request goes there, a session already bound finishes there (a
               graceful drain), exactly as an HTTPRoute backend at weight 0 gets none
    excluded   every entry when no entry has a positive weight: the table fails
               closed (Routable False), so the gateway answers 503, never spreads
               the traffic equally over homes that cannot take it

A candidate's `site`/`provider` is the gateway's backend for the home's cluster: the
home's `site` (default: the cluster name) and `provider` (default: the operator's
provider, else the site). The revision moves only when the rendered overlay's semantic
digest changed, and the file is rewritten (atomically) only then, so a gateway watching
it reloads once per real change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gridroute.config import ConfigError
from gridroute.control.atomicfile import write_atomic
from gridroute.control.overlay import next_revision
from gridroute.control.publish_directory import PublishError
from gridroute.core.groups import Admission
from gridroute.core.pickers import MAX_WEIGHT, Picker
from gridroute.wire.overlay import (
    CapabilityRoute,
    Overlay,
    OverlayCandidate,
    SelectionPolicy,
    digest,
    dumps,
    parse_overlay,
)
from gridroute.wire.trafficmap import TrafficMap

GENERATED_BY = "gridroute trafficmap"


@dataclass(frozen=True, slots=True)
class Binding:
    """How one service's map meets the gateway: its model name and, per cluster, the
    gateway's `site`/`provider` for that home."""

    model: str
    backends: Mapping[str, tuple[str, str]]

    def backend(self, cluster: str) -> tuple[str, str]:
        return self.backends.get(cluster, (cluster, cluster))


def default_binding(tm: TrafficMap) -> Binding:
    """A map whose service config is unknown (held as invalid before this process saw it
    valid): model = service name, each cluster its own site and provider."""
    return Binding(tm.spec.service, {})


def overlay_weights(weights: Sequence[int]) -> tuple[int, ...]:
    """The map's weights within the overlay's 0..MAX_WEIGHT: unchanged when they fit,
    else scaled so the largest is MAX_WEIGHT, each positive weight kept at least 1 (a
    home the map sends traffic to is never silenced by rounding) and 0 kept 0."""
    top = max(weights, default=0)
    if top <= MAX_WEIGHT:
        return tuple(weights)
    return tuple(0 if w == 0 else max(1, round(w * MAX_WEIGHT / top)) for w in weights)


def capability(tm: TrafficMap, binding: Binding) -> CapabilityRoute:
    """One service's map as an overlay capability (the rules in the module docstring)."""
    entries = tm.spec.entries
    scaled = overlay_weights([e.weight for e in entries])

    def candidate(i: int, group: int | None, admission: Admission) -> OverlayCandidate:
        entry = entries[i]
        site, provider = binding.backend(entry.cluster)
        return OverlayCandidate(
            site=site,
            provider=provider,
            cluster=entry.cluster,
            endpoint=entry.endpoint,
            selection_group=group,
            admission_state=admission,
            traffic_weight=scaled[i] if group is not None else None,
        )

    serving = [i for i, w in enumerate(scaled) if w > 0]
    if not serving:
        excluded = [candidate(i, None, Admission.EXCLUDED) for i in range(len(entries))]
        return CapabilityRoute(
            model=binding.model,
            selection_policy=SelectionPolicy(picker=Picker.WEIGHTED),
            excluded=excluded,
        )
    idle = [i for i, w in enumerate(scaled) if w == 0]
    candidates = [candidate(i, 0, Admission.NEW_AND_EXISTING) for i in serving]
    candidates += [candidate(i, 1, Admission.EXISTING_ONLY) for i in idle]
    return CapabilityRoute(
        model=binding.model,
        selection_policy=SelectionPolicy(picker=Picker.WEIGHTED),
        candidates=candidates,
    )


def render_overlay(
    maps: Sequence[TrafficMap], bindings: Mapping[tuple[str, str], Binding]
) -> Overlay:
    """Every map as one capability, sorted by model; refuses two services that claim the
    same model (a gateway routes a model one way)."""
    caps: dict[str, tuple[str, CapabilityRoute]] = {}
    for tm in sorted(maps, key=lambda m: (m.metadata.namespace, m.metadata.name)):
        key = (tm.metadata.namespace, tm.metadata.name)
        binding = bindings.get(key) or default_binding(tm)
        where = f"{key[0]}/{key[1]}"
        if binding.model in caps:
            raise PublishError(
                f"services {caps[binding.model][0]} and {where} both publish model "
                f"{binding.model!r}; give one of them another `model`"
            )
        caps[binding.model] = (where, capability(tm, binding))
    models = [cap for _, (_, cap) in sorted(caps.items())]
    return Overlay(generated_by=GENERATED_BY, models=models)


class OverlayPublisher:
    """Writes the rendered overlay to one file, bumping its revision on each change."""

    name = "overlay"

    def __init__(self, path: Path) -> None:
        self.path = path

    def previous(self) -> Overlay | None:
        """The overlay in the file now; None when there is none or it does not parse
        (then the next write starts again at revision 1)."""
        try:
            return parse_overlay(self.path.read_text(), str(self.path))
        except (OSError, ConfigError):
            return None

    def write(
        self, maps: Sequence[TrafficMap], bindings: Mapping[tuple[str, str], Binding]
    ) -> Overlay:
        """Render, and replace the file when the overlay changed; returns what the file
        holds afterwards."""
        rendered = render_overlay(maps, bindings)
        previous = self.previous()
        current = next_revision(previous, rendered)
        if previous is not None and digest(previous) == digest(current):
            return previous
        try:
            write_atomic(self.path, dumps(current))
        except OSError as exc:
            raise PublishError(f"write {self.path}: {exc}") from exc
        return current
