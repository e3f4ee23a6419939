"""What the control plane needs of the official `kubernetes` client, in one place: the
slice of `kubernetes.dynamic.DynamicClient` it calls (so tests drive it with a fake and
no cluster), retries with exponential backoff, and a client on the local credentials
(`pip install 'gridroute[kubernetes]'`; the in-cluster config, else the kubeconfig).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class DynamicClient(Protocol):
    """What gridroute calls of `kubernetes.dynamic.DynamicClient`."""

    resources: Any

    def server_side_apply(
        self,
        resource: Any,
        body: Any = None,
        name: str | None = None,
        namespace: str | None = None,
        force_conflicts: bool | None = None,
        **kwargs: Any,
    ) -> Any: ...

    def delete(
        self, resource: Any, name: str | None = None, namespace: str | None = None, **kwargs: Any
    ) -> Any: ...

    def get(
        self, resource: Any, name: str | None = None, namespace: str | None = None, **kwargs: Any
    ) -> Any: ...


class ClusterClient:
    """A dynamic client, the field manager it applies as, and the retry settings every
    call of the map store and of the route publisher uses."""

    def __init__(
        self,
        client: DynamicClient,
        field_manager: str,
        *,
        attempts: int = 4,
        backoff_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep


class KubeCallError(Exception):
    """A call that failed on every attempt; says what it was and the last error."""


def not_found(exc: Exception) -> bool:
    return getattr(exc, "status", None) == 404


def retry(
    what: str,
    call: Callable[[], T],
    *,
    attempts: int,
    backoff_s: float,
    sleep: Callable[[float], None],
    give_up: Callable[[Exception], bool] = lambda _: False,
) -> T:
    """`call()`, again after backoff_s, 2 backoff_s, ... until `attempts` ran out (or
    `give_up(exc)`: an answer no retry changes, such as 404, is raised at once)."""
    delay = backoff_s
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts or give_up(exc):
                raise KubeCallError(f"{what}: {exc}") from exc
            log.warning("%s failed (attempt %d of %d): %s", what, attempt, attempts, exc)
            sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def as_dict(obj: Any) -> Any:
    """A `ResourceInstance` (or a fake's dict) as plain data."""
    return obj.to_dict() if hasattr(obj, "to_dict") else obj


def from_kubeconfig() -> DynamicClient:
    """A dynamic client on the in-cluster config, or the local kubeconfig."""
    from kubernetes import client, config, dynamic

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return dynamic.DynamicClient(client.ApiClient())  # type: ignore[no-any-return]
