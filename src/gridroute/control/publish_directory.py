"""The directory publisher: one YAML file per route (the HTTPRoute, then its ExternalName
Services and BackendTLSPolicies), for GitOps or `kubectl apply -f`.

    <directory>/<namespace>/<route-name>.yaml

A write replaces the whole file atomically; a failed write leaves the last published
route in place, which is what the gateway keeps serving.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gridroute.control.atomicfile import remove, write_atomic
from gridroute.wire.httproute import RenderedRoute


class PublishError(Exception):
    """A publisher could not write (or remove) a route."""


class DirectoryPublisher:
    name = "directory"

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, namespace: str, name: str) -> Path:
        return self.root / namespace / f"{name}.yaml"

    def apply(self, rendered: RenderedRoute) -> None:
        meta = rendered.route["metadata"]
        text = yaml.safe_dump_all(rendered.objects, sort_keys=False)
        path = self.path(meta["namespace"], meta["name"])
        try:
            if path.exists() and path.read_text() == text:
                return  # unchanged: no churn for a GitOps tool watching the directory
            write_atomic(path, text)
        except OSError as exc:
            raise PublishError(f"write {meta['namespace']}/{meta['name']}: {exc}") from exc

    def remove(self, namespace: str, name: str, source: tuple[str, str] | None = None) -> None:
        """Remove the route's file (everything it owned is in it); `source` is unused."""
        try:
            remove(self.path(namespace, name))
        except OSError as exc:
            raise PublishError(f"remove {namespace}/{name}: {exc}") from exc

    def read(self, namespace: str, name: str) -> list[dict[str, object]] | None:
        """The published objects, or None when no route is published."""
        try:
            return list(yaml.safe_load_all(self.path(namespace, name).read_text()))
        except FileNotFoundError:
            return None
