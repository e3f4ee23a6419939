"""control.yaml files for tests: the seed's llama-chat example, tweakable."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SEED: dict[str, Any] = {
    "store": "state",
    "probe": {"disabled": True},
    "publish": {
        "directory": "routes",
        "globalGateway": "gateway-system/global",
        "backendPort": 80,
        "globalHostTemplate": "{{.Name}}.{{.Namespace}}.global.example.com",
    },
    "services": [
        {
            "name": "llama-chat",
            "namespace": "llama-demo",
            "mode": "Split",
            "homes": [
                {
                    "cluster": "cluster-a",
                    "endpoint": "http://llama-chat.llama-demo.cluster-a.example.com",
                    "allocated": 4,
                    "ready": 4,
                },
                {
                    "cluster": "cluster-b",
                    "endpoint": "http://llama-chat.llama-demo.cluster-b.example.com",
                    "allocated": 2,
                    "ready": 2,
                },
            ],
        }
    ],
}


def seed() -> dict[str, Any]:
    return copy.deepcopy(SEED)


def write(tmp: Path, data: dict[str, Any]) -> Path:
    path = tmp / "control.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Clock:
    def __init__(self, now: float = 1_790_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
