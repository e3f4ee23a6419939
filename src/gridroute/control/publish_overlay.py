"""The overlay publisher: the maps' weights as `traffic_weight`s for gridroute's own
gateways (the weighted picker of the routing overlay).

The routing overlay's schema is not in this tree yet (the overlay issue defines it), so
this writes a plain JSON file the picker can read, one object per service:

    {"kind": "TrafficWeights", "version": 1,
     "services": [{"name": "llama-chat", "namespace": "llama-demo", "generation": 4,
                   "candidates": [{"cluster": "cluster-a", "endpoint": "http://...",
                                   "traffic_weight": 2}, ...]}]}

Weights are the map's, verbatim (0 included: a drained home stays listed at 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gridroute.control.atomicfile import write_atomic
from gridroute.control.publish_directory import PublishError
from gridroute.wire.trafficmap import TrafficMap


def weights_document(maps: list[TrafficMap]) -> dict[str, Any]:
    services = [
        {
            "name": tm.spec.service,
            "namespace": tm.metadata.namespace,
            "generation": tm.metadata.generation,
            "candidates": [
                {"cluster": e.cluster, "endpoint": e.endpoint, "traffic_weight": e.weight}
                for e in tm.spec.entries
            ],
        }
        for tm in sorted(maps, key=lambda m: (m.metadata.namespace, m.metadata.name))
    ]
    return {"kind": "TrafficWeights", "version": 1, "services": services}


class OverlayPublisher:
    name = "overlay"

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, maps: list[TrafficMap]) -> None:
        text = json.dumps(weights_document(maps), indent=2) + "\n"
        try:
            write_atomic(self.path, text)
        except OSError as exc:
            raise PublishError(f"write {self.path}: {exc}") from exc
