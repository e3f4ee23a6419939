"""The control plane's RBAC in the chart grants exactly what its Kubernetes code calls.

What the code calls is read from the code two ways: the source (`ast`) says which
client methods the route publisher and the map store call, and which the client slice
(`kube_client.DynamicClient`) has; a recording client then drives both through every
path (apply, prune, remove; write, read, list, release, delete) and records each call's
verb and resource. Every method the source calls must have been seen, so a new call
site, method or kind without a rule fails here; and the rules the chart renders must be
that set exactly, so a grant nothing uses fails too."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest

from gridroute.control import kube_client, publish_kubernetes, store_kubernetes
from gridroute.control.publish_kubernetes import KINDS, OWNED, KubernetesPublisher
from gridroute.control.reconcile import Reconciler
from gridroute.control.store_kubernetes import KubernetesMaps
from gridroute.wire.httproute import ISVC_LABEL, NAMESPACE_LABEL, RenderedRoute
from tests.control.controlfiles import Clock, seed, write
from tests.control.fake_kube import FakeDynamicClient
from tests.deploy.test_chart import ROOT, render

Rule = tuple[str, str, str]
"""(API group, resource[/subresource], verb)"""

VERBS = {"server_side_apply": ("create", "patch"), "delete": ("delete",)}
"""The RBAC verbs of each client method; `get` is `get` with a name, else `list`.
Server-side apply is a PATCH, authorised as `create` too when the object is new."""


def resource_of(api_version: str, kind: str) -> tuple[str, str]:
    """(group, plural[/sub]) of a kind as the client resolves it (`Kind/status` for the
    status subresource of the fake's resources)."""
    kind, _, sub = kind.partition("/")
    group = api_version.rpartition("/")[0]
    lower = kind.lower()
    plural = lower[:-1] + "ies" if lower.endswith("y") else lower + "s"
    return group, f"{plural}/{sub}" if sub else plural


class Recording(FakeDynamicClient):
    def __init__(self) -> None:
        super().__init__()
        self.calls: set[tuple[str, Rule]] = set()

    def _record(self, method: str, resource: Any, verbs: tuple[str, ...]) -> None:
        group, plural = resource_of(resource.api_version, resource.kind)
        self.calls |= {(method, (group, plural, v)) for v in verbs}

    def server_side_apply(self, resource, body=None, name=None, namespace=None, **kw):
        # A subresource is never created by its apply (the object is there, or 404).
        sub = "/" in resource.kind
        self._record(
            "server_side_apply", resource, ("patch",) if sub else VERBS["server_side_apply"]
        )
        return super().server_side_apply(resource, body, name, namespace, **kw)

    def get(self, resource, name=None, namespace=None, **kw):
        self._record("get", resource, ("get",) if name is not None else ("list",))
        return super().get(resource, name, namespace, **kw)

    def delete(self, resource, name=None, namespace=None, **kw):
        self._record("delete", resource, VERBS["delete"])
        return super().delete(resource, name, namespace, **kw)

    def rules(self) -> set[Rule]:
        return {rule for _, rule in self.calls}

    def methods(self) -> set[str]:
        return {m for m, _ in self.calls}


def client_calls(module: Any) -> set[str]:
    """The `self.client.<method>(...)` calls in a module's source."""
    tree = ast.parse(Path(module.__file__).read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            on_client = isinstance(target, ast.Attribute) and target.attr == "client"
            if on_client and isinstance(target.value, ast.Name) and target.value.id == "self":
                out.add(node.func.attr)
    return out


def protocol_methods() -> set[str]:
    tree = ast.parse(Path(kube_client.__file__).read_text())
    (proto,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DynamicClient"]
    return {n.name for n in proto.body if isinstance(n, ast.FunctionDef)}


def _obj(kind: str, name: str, ns: str = "llama-demo") -> dict[str, Any]:
    labels = {ISVC_LABEL: "llama-chat", NAMESPACE_LABEL: "llama-demo"}
    return {"apiVersion": KINDS[kind], "kind": kind,
            "metadata": {"name": name, "namespace": ns, "labels": labels}}  # fmt: skip


def _rendered(clusters: list[str]) -> RenderedRoute:
    return RenderedRoute(
        route=_obj("HTTPRoute", "llama-chat-global"),
        services=[_obj("Service", f"llama-chat-{c}") for c in clusters],
        endpoint_slices=[_obj("EndpointSlice", f"llama-chat-{c}-1") for c in clusters],
        policies=[_obj("BackendTLSPolicy", f"llama-chat-{c}") for c in clusters],
        grants=[_obj("ReferenceGrant", "llama-chat")] if clusters else [],
    )


def publisher_calls() -> Recording:
    """Every path of the route publisher: apply, apply with a cluster gone (prune), remove."""
    client = Recording()
    pub = KubernetesPublisher(client, "gridroute-test", sleep=lambda _: None)
    pub.apply(_rendered(["cluster-a", "cluster-b"]))
    pub.apply(_rendered(["cluster-a"]))
    pub.remove("llama-demo", "llama-chat-global")
    assert client.kinds() == []
    return client


def store_calls(tmp: Path) -> Recording:
    """Every path of the map store: the reconciler's writes, reads and lists, a release
    and delete."""
    client = Recording()
    maps = KubernetesMaps(client, "gridroute-test", attempts=1, sleep=lambda _: None)
    data = seed()
    data["mapStore"] = "kubernetes"
    rec = Reconciler(write(tmp, data), clock=Clock(), maps=maps)
    asyncio.run(rec.run_once())
    asyncio.run(rec.run_once())
    assert [m.metadata.name for m in maps.maps()] == ["llama-chat"]
    assert maps.read_map("llama-demo", "llama-chat") is not None
    maps.delete_map("llama-demo", "llama-chat")
    assert client.kinds() == []
    return client


def chart_rules(*sets: str) -> dict[str, set[Rule]]:
    """The rules of each control-plane Role and ClusterRole the chart renders, by name."""
    objs = render(ROOT / "examples/kubernetes/three-clusters/control-plane.yaml", *sets)
    out: dict[str, set[Rule]] = {}
    for o in objs:
        if o["kind"] in ("Role", "ClusterRole"):
            key = f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
            out[key] = {
                (g, r, v) for rule in o["rules"] for g in rule["apiGroups"]
                for r in rule["resources"] for v in rule["verbs"]
            }  # fmt: skip
    return out


def test_every_client_method_the_code_calls_has_its_verbs() -> None:
    called = client_calls(publish_kubernetes) | client_calls(store_kubernetes)
    assert called == protocol_methods() == {"server_side_apply", "get", "delete"}
    assert set(VERBS) | {"get"} == called


def test_the_recorded_paths_reach_every_call_and_kind_of_the_code(tmp_path: Path) -> None:
    pub, maps = publisher_calls(), store_calls(tmp_path)
    assert pub.methods() == client_calls(publish_kubernetes)
    assert maps.methods() == client_calls(store_kubernetes)
    applied = {r for m, (_, r, v) in pub.calls if m == "server_side_apply"}
    assert applied == {resource_of(v, k)[1] for k, v in KINDS.items()}
    listed = {r for _, (_, r, v) in pub.calls if v == "list"}
    assert listed == {resource_of(KINDS[k], k)[1] for k in OWNED}


@pytest.mark.parametrize(
    "sets", [(), ("controlPlane.namespaces=null",)], ids=["roles-per-namespace", "cluster-role"]
)
def test_the_charts_rules_are_exactly_what_the_code_calls(tmp_path: Path, sets) -> None:
    routes, maps = publisher_calls().rules(), store_calls(tmp_path).rules()
    rules = chart_rules(*sets)
    by_name = {k.rsplit("/", 1)[1]: v for k, v in rules.items()}
    assert by_name["control-gridroute-control-trafficmaps"] == maps
    assert by_name["control-gridroute-control-routes"] == routes
    if sets:
        assert set(rules) == {"ClusterRole//control-gridroute-control-trafficmaps",
                              "ClusterRole//control-gridroute-control-routes"}  # fmt: skip
    else:  # the example publishes into llama-demo only
        assert "Role/llama-demo/control-gridroute-control-routes" in rules
        assert not any(k.startswith("ClusterRole//") and "routes" in k for k in rules)


def test_the_service_account_is_bound_to_both() -> None:
    objs = render(ROOT / "examples/kubernetes/three-clusters/control-plane.yaml")
    (sa,) = [o for o in objs if o["kind"] == "ServiceAccount"]
    bindings = [o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert {b["roleRef"]["name"] for b in bindings} == {
        "control-gridroute-control-trafficmaps", "control-gridroute-control-routes"
    }  # fmt: skip
    for b in bindings:
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "grid"}
        ]
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
