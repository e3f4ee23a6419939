"""deploy/kubernetes/gridroute: every example of examples/kubernetes/ rendered with the
real `helm template` (Helm from `make`'s `.venv/bin/helm`, deploy/kubernetes/fetch_helm.py)
and every object validated: Kubernetes' own kinds against the schemas of one pinned
Kubernetes release (`kubernetes-validate`, strict: an unknown field fails), the CRD-typed
ones (ServiceMonitor, PrometheusRule, cert-manager Certificate) against the CRDs in
tests/deploy/fixtures/, Gateway API ones against shared/fixtures/gateway-api/. The
configs the chart writes are validated by gridroute's own models, and bad values fail
at render naming the key, with nothing rendered."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gridroute.control.config import ControlConfig, ServiceConfig
from gridroute.gateway.config import GatewayConfig
from gridroute.gateway.config import parse_config as parse_gateway
from gridroute.operator.config import parse_config as parse_operator
from gridroute.wire.overlay import Overlay
from tests.wire.crd_schema import errors

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "kubernetes" / "gridroute"
EXAMPLES = sorted((ROOT / "examples" / "kubernetes").glob("*/*.yaml"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = ROOT.parent / "shared" / "fixtures"
K8S_VERSION = "1.33.0"
"""The Kubernetes release whose schemas every object must satisfy."""

CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"):
        FIXTURES / "prometheus-operator" / "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"):
        FIXTURES / "prometheus-operator" / "monitoring.coreos.com_prometheusrules.yaml",
    ("cert-manager.io/v1", "Certificate"):
        FIXTURES / "cert-manager" / "cert-manager.io_certificates.yaml",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): SHARED / "gateway-api" / "httproutes-crd.yaml",
}  # fmt: skip


def helm() -> str:
    found = Path(sys.prefix) / "bin" / "helm"
    if found.exists():
        return str(found)
    on_path = shutil.which("helm")
    if on_path is None:
        pytest.fail("no helm: `make .venv/bin/helm` (make test does it) installs it")
    return on_path


def release(values: Path) -> tuple[str, str]:
    """(release, namespace) an example is installed as (docs/kubernetes.md)."""
    site = yaml.safe_load(values.read_text())["site"]
    namespace = f"grid-{site}" if values.parent.name == "three-sites-one-cluster" else "grid"
    return site, namespace


def run_helm(values: list[Path], *sets: str, name: str = "hub", namespace: str = "grid"):
    args = [helm(), "template", name, str(CHART), "-n", namespace]
    for v in values:
        args += ["-f", str(v)]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@functools.cache
def _render(values: Path, sets: tuple[str, ...] = ()) -> tuple[dict[str, Any], ...]:
    name, namespace = release(values)
    done = run_helm([values], *sets, name=name, namespace=namespace)
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def render(values: Path, *sets: str) -> list[dict[str, Any]]:
    return list(_render(values, sets))


@functools.cache
def crd_schema(path: Path) -> dict[str, Any]:
    (crd,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return version["schema"]["openAPIV3Schema"]


def one(objs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def config_of(objs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    for o in objs:
        if o["kind"] == "ConfigMap" and key in o.get("data", {}):
            return yaml.safe_load(o["data"][key])
    raise KeyError(key)


def ids(path: Path) -> str:
    return str(path.relative_to(ROOT / "examples" / "kubernetes"))


def test_there_are_examples_for_one_site_three_sites_and_three_clusters() -> None:
    assert {p.parent.name for p in EXAMPLES} == {
        "one-site", "three-sites-one-cluster", "three-clusters"
    }  # fmt: skip
    assert (ROOT / "examples/kubernetes/three-clusters/control-plane.yaml") in EXAMPLES


@pytest.mark.parametrize("values", EXAMPLES, ids=ids)
def test_every_object_is_valid_against_the_real_schemas(values: Path) -> None:
    objs = render(values)
    assert objs
    for obj in objs:
        key = (obj["apiVersion"], obj["kind"])
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if key in CRDS:
            assert errors(obj, crd_schema(CRDS[key]), strict=True) == [], where
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "gridroute", where


@pytest.mark.parametrize("values", EXAMPLES, ids=ids)
def test_the_configs_it_writes_are_valid_gridroute_configs(values: Path) -> None:
    objs = render(values)
    for o in objs:
        data = o.get("data", {}) if o["kind"] == "ConfigMap" else {}
        if "gateway.yaml" in data:
            cfg = parse_gateway(data["gateway.yaml"], "gateway.yaml")
            assert cfg.workers == 1 and cfg.local_site == yaml.safe_load(values.read_text())["site"]
        if "overlay.json" in data:
            Overlay.model_validate(json.loads(data["overlay.json"]))
        if "operator.yaml" in data:
            parse_operator(yaml.safe_load(data["operator.yaml"]), "operator.yaml")
        if "control.yaml" in data:
            control = yaml.safe_load(data["control.yaml"])
            ControlConfig.model_validate(control)
            for service in control["services"]:
                ServiceConfig.model_validate(service)


@pytest.mark.parametrize("values", EXAMPLES, ids=ids)
def test_every_container_is_non_root_on_a_read_only_root(values: Path) -> None:
    for dep in (o for o in render(values) if o["kind"] == "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]


ONE = ROOT / "examples" / "kubernetes" / "one-site" / "values.yaml"
THREE = ROOT / "examples" / "kubernetes" / "three-clusters"


def test_the_gateway_probes_ports_and_drain_match_what_the_gateway_does() -> None:
    objs = render(ONE)
    cfg = GatewayConfig.model_validate(config_of(objs, "gateway.yaml"))
    pod = one(objs, "Deployment", "-gateway")["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": int(cfg.listen.rsplit(":", 1)[1]),
                     "metrics": int((cfg.metrics.listen or "").rsplit(":", 1)[1])}  # fmt: skip
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    sleep = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] == (
        sleep + cfg.shutdown_drain_s + cfg.shutdown_grace_s + 5
    )
    assert c["args"] == ["gateway", "--config", "/etc/gridroute/config/gateway.yaml"]
    assert {"name": "GRIDROUTE_POD_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]  # fmt: skip
    (check,) = pod["initContainers"]
    assert check["args"] == ["config", "check", "--kind", "gateway",
                             "/etc/gridroute/config/gateway.yaml"]  # fmt: skip
    assert check["volumeMounts"] == c["volumeMounts"]


def test_the_grace_period_follows_the_drain_and_its_defaults_are_the_gateways() -> None:
    fields = GatewayConfig.model_fields
    assert (fields["shutdown_drain_s"].default, fields["shutdown_grace_s"].default) == (5, 30)
    objs = render(ONE, "gateway.config.shutdown_grace_s=120", "gateway.preStopSleepSeconds=2")
    pod = one(objs, "Deployment", "-gateway")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 2 + 5 + 120 + 5


def test_a_changed_gateway_config_rolls_the_gateways_and_not_the_operator() -> None:
    def checksums(objs: list[dict[str, Any]]) -> tuple[str, str]:
        return tuple(  # type: ignore[return-value]
            one(objs, "Deployment", s)["spec"]["template"]["metadata"]["annotations"][
                "checksum/config"
            ]
            for s in ("-gateway", "-operator")
        )

    before = checksums(render(ONE))
    after = checksums(render(ONE, "gateway.config.shutdown_grace_s=60"))
    assert after[0] != before[0] and after[1] == before[1]


def test_the_operator_probes_healthz_over_mutual_tls_and_only_gateways_and_peers_reach_it() -> None:
    objs = render(THREE / "west.yaml")
    cfg = parse_operator(config_of(objs, "operator.yaml"), "operator.yaml")
    assert cfg.site == "west" and cfg.tls is not None and cfg.port == 9443
    (c,) = one(objs, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"]
    probe = c["readinessProbe"]["exec"]["command"]
    assert probe[:3] == ["gridroute", "wait", "https://localhost:9443/healthz"]
    assert probe[probe.index("--cert") + 1] == str(cfg.tls.client_cert)
    assert c["livenessProbe"]["exec"]["command"] == probe
    policy = one(objs, "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "signals", "protocol": "TCP"}]
    sources = rule["from"]
    assert sources[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    assert {"ipBlock": {"cidr": "198.51.100.0/24"}} in sources
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"


def test_cert_manager_certificates_carry_the_sites_spiffe_id() -> None:
    certs = [o for o in render(THREE / "east.yaml") if o["kind"] == "Certificate"]
    assert {c["spec"]["secretName"] for c in certs} == {
        "east-gridroute-gateway-tls", "east-gridroute-operator-tls",
        "east-gridroute-operator-client-tls",
    }  # fmt: skip
    for c in certs:
        assert c["spec"]["uris"] == ["spiffe://gridroute.local/site/east"]
        assert "localhost" in c["spec"]["dnsNames"]
    server = one(certs, "Certificate", "-operator-tls")
    assert "operator.east.grid.example.com" in server["spec"]["dnsNames"]
    assert "server auth" in server["spec"]["usages"]


def test_the_prometheus_rule_is_deploy_prometheus_rules_unchanged() -> None:
    rule = one(render(ONE), "PrometheusRule")
    rules = ROOT / "deploy" / "prometheus" / "rules"
    files = [yaml.safe_load((rules / f).read_text()) for f in ("recording.yml", "alerts.yml")]
    assert rule["spec"]["groups"] == [g for f in files for g in f["groups"]]


def test_the_control_plane_ships_the_crd_and_runs_the_reconciler() -> None:
    objs = render(THREE / "control-plane.yaml")
    crd = one(objs, "CustomResourceDefinition")
    shipped = yaml.safe_load((ROOT / "deploy/kubernetes/trafficmaps-crd.yaml").read_text())
    # The file as it is, kept on uninstall (deleting a CRD deletes every TrafficMap).
    assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    added = {"app.kubernetes.io/name": "gridroute", "app.kubernetes.io/managed-by": "Helm"}
    assert crd["metadata"]["labels"] == {**shipped["metadata"]["labels"], **added}
    crd["metadata"]["labels"] = shipped["metadata"]["labels"]
    assert crd == shipped
    assert not [o for o in objs if o["kind"] in ("Service", "HorizontalPodAutoscaler")]
    (c,) = one(objs, "Deployment", "-control")["spec"]["template"]["spec"]["containers"]
    assert c["args"] == ["trafficmap", "reconcile", "--config",
                         "/etc/gridroute/config/control.yaml"]  # fmt: skip
    without = render(THREE / "control-plane.yaml", "controlPlane.installCRD=false")
    assert not [o for o in without if o["kind"] == "CustomResourceDefinition"]


def test_three_sites_in_one_cluster_reach_each_others_operators_by_cluster_dns() -> None:
    for site in ("hub", "west", "east"):
        objs = render(ROOT / "examples/kubernetes/three-sites-one-cluster" / f"{site}.yaml")
        services = {o["metadata"]["name"] for o in objs if o["kind"] == "Service"}
        assert f"{site}-gridroute-operator" in services
        peers = parse_operator(config_of(objs, "operator.yaml"), "operator.yaml").peers
        for p in peers:
            assert p.url == f"https://{p.site}-gridroute-operator.grid-{p.site}.svc:9443"
        gw = parse_gateway(yaml.safe_dump(config_of(objs, "gateway.yaml")))
        assert gw.operator is not None
        assert gw.operator.url == f"https://{site}-gridroute-operator.grid-{site}.svc:9443"


BAD = [
    ("site=", "'/site'"),
    ("site=Hub_1", "'/site'"),
    ("gateway.replicas=two", "'/gateway/replicas': got string, want integer"),
    ("gateway.port=99999", "'/gateway/port'"),
    ("tls.mode=vault", "'/tls/mode'"),
    ("gateway.autoscaling.enabled=maybe", "'/gateway/autoscaling/enabled'"),
    ("gateway.config.sites=null", "'/gateway/config/sites'"),
    ("operator.config.providers=null", "'/operator/config/providers'"),
    ("gateway.config.shutdown_grace_s=soon", "'/gateway/config/shutdown_grace_s'"),
    ("nosuchkey=1", "'nosuchkey'"),
]


@pytest.mark.parametrize(("bad", "key"), BAD, ids=[b for b, _ in BAD])
def test_a_bad_value_fails_at_render_naming_the_key_and_renders_nothing(bad: str, key: str) -> None:
    done = run_helm([ONE], bad)
    assert done.returncode != 0 and done.stdout == ""
    assert "values don't meet the specifications of the schema" in done.stderr
    assert key in done.stderr


def test_the_defaults_alone_fail_naming_the_site() -> None:
    done = run_helm([])
    assert done.returncode != 0 and done.stdout == ""
    assert "'/site'" in done.stderr and "'/gateway/config': missing properties" in done.stderr


@pytest.mark.parametrize("values", EXAMPLES, ids=ids)
def test_helm_lint_strict_passes(values: Path) -> None:
    done = subprocess.run([helm(), "lint", "--strict", str(CHART), "-f", str(values)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_walkthroughs_fake_backend_is_valid_and_is_what_one_site_routes_to() -> None:
    objs = [d for d in yaml.safe_load_all((ROOT / "examples/kubernetes/fake-backend.yaml")
            .read_text()) if d]  # fmt: skip
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    service = one(objs, "Service")
    url = f"http://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:8000"
    gw = GatewayConfig.model_validate(config_of(render(ONE), "gateway.yaml"))
    assert [s.backend_url for s in gw.sites] == [url]


def test_extra_volumes_are_mounted_in_the_container_and_its_config_check() -> None:
    objs = render(ONE, "gateway.extraVolumes[0].name=nats",
                  "gateway.extraVolumes[0].secret.secretName=nats-client",
                  "gateway.extraVolumeMounts[0].name=nats",
                  "gateway.extraVolumeMounts[0].mountPath=/etc/gridroute/nats")  # fmt: skip
    kubernetes_validate.validate(one(objs, "Deployment", "-gateway"), K8S_VERSION, strict=True)
    pod = one(objs, "Deployment", "-gateway")["spec"]["template"]["spec"]
    assert {"name": "nats", "secret": {"secretName": "nats-client"}} in pod["volumes"]
    for c in pod["containers"] + pod["initContainers"]:
        assert {"name": "nats", "mountPath": "/etc/gridroute/nats"} in c["volumeMounts"]
