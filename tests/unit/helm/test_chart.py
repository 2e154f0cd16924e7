"""The Helm chart, validated offline: strict lint, rendering with default/dev/GPU values, built-in kinds
against Kubernetes schemas, KubeRay resources against the CRD schemas in ../shared/kuberay-crds/."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import helm_python as helm  # the Helm SDK is a dev dependency: missing is a failure, never a skip
import pytest
import yaml

from cluster.config import RagcConfig
from serve.edge.lost_replica import proxy_env
from serve.tracing import EXPORTER_IMPORT_PATH

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "ragc"
# ../shared beside the checkout holds the KubeRay CRD schemas (RAGC_SHARED_DIR overrides where it is)
CRDS = Path(os.environ.get("RAGC_SHARED_DIR", ROOT.parent / "shared")) / "kuberay-crds"
KUBE_VERSION = "1.30.0"
BASE = {"externalMilvus": {"uri": "http://milvus.example:19530"}, "existingSecret": "ragc-secrets"}
RAY_KINDS = {"RayService": "rayservices", "RayJob": "rayjobs", "RayCronJob": "raycronjobs"}
DEPLOYMENTS = {"ingress", "rewrite", "retrieve", "rerank", "synthesize", "llm_default"}


def values_file(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / name).read_text())


VALUE_SETS = {
    "default": BASE,
    "dev": values_file("values-dev.yaml"),
    "gpu": values_file("values-gpu.yaml"),
    "jobs": {
        **BASE,
        "reindexJob": {"enabled": True, "sources": [{"tenant": "acme", "source": "/data/acme"}]},
        "sync": {"enabled": True, "tenants": [{"tenant": "acme", "source": "s3://bucket/acme"}]},
        "ingress": {"enabled": True, "host": "rag.example.com"},
        "podMonitor": {"enabled": True},
        "alerts": {"enabled": True},
        "milvus": {"enabled": True},
        "redis": {"enabled": True},
    },
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    manifests = helm.Chart.load(str(CHART)).render(values, name="rel", namespace="rag")
    docs = []
    for path, text in manifests.items():
        if path.endswith(".txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    # a CRD is ~1 MB of YAML: parsed once per kind, with libyaml (pure-Python parsing took seconds per object)
    crd = yaml.load((CRDS / f"ray.io_{RAY_KINDS[kind]}.yaml").read_text(), Loader=yaml.CSafeLoader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_strict_lint_is_clean(name: str) -> None:
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, problems or report["errors"]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_validate(name: str) -> None:
    import jsonschema
    import kubernetes_validate

    docs = render(VALUE_SETS[name])
    kinds = [d["kind"] for d in docs]
    assert "RayService" in kinds and "ConfigMap" in kinds and "Service" in kinds
    for doc in docs:
        if doc["kind"] in RAY_KINDS:
            jsonschema.validate(doc, crd_schema(doc["kind"]))
        elif doc["kind"] not in ("PodMonitor", "PrometheusRule"):  # Prometheus-operator CRDs, not built-in kinds
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        for container in _containers(doc):
            assert container.get("resources", {}).get("requests"), f"{doc['kind']} {container['name']} has no requests"
            assert not container["image"].endswith(":latest")


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "containers" in node and isinstance(node["containers"], list):
                found.extend(node["containers"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    return found


def serve_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    service = next(d for d in docs if d["kind"] == "RayService")
    return yaml.safe_load(service["spec"]["serveConfigV2"])


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_serve_config_parses_and_every_stage_autoscales_on_its_own(name: str) -> None:
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import ServeDeploySchema

    config = serve_config(render(VALUE_SETS[name]))
    ServeDeploySchema.model_validate(config)
    deployments = {d["name"]: d for d in config["applications"][0]["deployments"]}
    assert set(deployments) == DEPLOYMENTS
    for options in deployments.values():
        AutoscalingConfig(**options["autoscaling_config"])


def test_chart_serve_block_is_generated_from_the_config_tree() -> None:

    from serve.serve_config import helm_values_block, helm_values_schema, stage_deployments

    text = (CHART / "values.yaml").read_text()
    assert helm_values_block(RagcConfig()) in text, "run `ragc serve-config --helm-chart helm/ragc`"
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema == helm_values_schema(schema), "run `ragc serve-config --helm-chart helm/ragc`"
    rendered = {d["name"]: d for d in serve_config(render(BASE))["applications"][0]["deployments"]}
    for stage, options in stage_deployments(RagcConfig()).items():
        assert {k: v for k, v in rendered[stage].items() if k != "name"} == options


def test_gpu_values_put_model_stages_on_gpu_workers() -> None:
    docs = render(VALUE_SETS["gpu"])
    deployments = {d["name"]: d for d in serve_config(docs)["applications"][0]["deployments"]}
    for stage in ("retrieve", "rerank"):
        assert 0 < deployments[stage]["ray_actor_options"]["num_gpus"] < 1
    assert deployments["llm_default"]["ray_actor_options"]["num_gpus"] == 1, "a vLLM engine owns its GPU"
    for stage in ("ingress", "rewrite", "synthesize"):
        assert deployments[stage]["ray_actor_options"]["num_gpus"] == 0
    service = next(d for d in docs if d["kind"] == "RayService")
    groups = {g["groupName"]: g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    container = groups["gpu"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert groups["gpu"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert config["ingest"]["gpus_per_actor"] == 1, "ingest embedding actors ask for GPUs too"
    assert config["embedding"]["model_id"] == "BAAI/bge-small-en-v1.5"


def test_secrets_are_only_referenced() -> None:
    docs = render(VALUE_SETS["gpu"])
    assert "Secret" not in {d["kind"] for d in docs}
    text = yaml.safe_dump_all(docs)
    assert "secretKeyRef" in text and "ragc-secrets" in text
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert config["milvus"]["token"] == {"env_var": "MILVUS_TOKEN"}
    assert config["serve"]["auth"]["api_keys"] == {"file": "/etc/ragc/secrets/api-keys.json"}
    # mounted as a folder: the kubelet refreshes it when the Secret changes (a subPath mount it never refreshes),
    # and each ingress replica reads the keys again (serve.auth.reload_s), so a rotated key needs no restart
    mounts = [
        m
        for d in docs
        if d["kind"] == "RayService"
        for c in d["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
        for m in c.get("volumeMounts", [])
        if m["mountPath"] == "/etc/ragc/secrets"
    ]
    assert mounts and all("subPath" not in m for m in mounts)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"existingSecret": "s"}, "externalMilvus"),
        ({**BASE, "workers": {"cpu": {"replicas": -1}}}, "replicas"),
        ({**BASE, "image": {"tag": "latest"}}, "tag"),
        ({**BASE, "serve": {"deployments": {"rerank": {"autoscaling_config": {"min_replicas": -2}}}}}, "min_replicas"),
        ({**BASE, "sync": {"enabled": True, "tenants": [{"tenant": "a", "source": "/x; rm -rf /"}]}}, "source"),
        ({**BASE, "sync": {"enabled": True, "tenants": [{"tenant": "a", "source": "/x", "name": "a b"}]}}, "name"),
    ],
)
def test_bad_values_are_refused_with_a_clear_message(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def test_a_tenant_synced_from_two_named_sources_passes_each_name() -> None:
    sources = [
        {"tenant": "acme", "source": "/data/handbook", "name": "handbook"},
        {"tenant": "acme", "source": "s3://bucket/wiki", "name": "wiki"},
        {"tenant": "beta", "source": "/data/beta"},
    ]
    docs = render({**BASE, "sync": {"enabled": True, "prune": True, "tenants": sources}})
    cron = next(d for d in docs if d["kind"] == "RayCronJob")
    assert cron["spec"]["jobTemplate"]["entrypoint"].split(" && ") == [
        "ragc ingest /data/handbook --tenant acme --source handbook --json --prune",
        "ragc ingest s3://bucket/wiki --tenant acme --source wiki --json --prune",
        "ragc ingest /data/beta --tenant beta --json --prune",
    ]


def test_object_store_credentials_come_only_from_the_secret() -> None:
    docs = render(
        {
            **BASE,
            "sync": {"enabled": True, "tenants": [{"tenant": "a", "source": "s3://bucket/a"}]},
            "objectStore": {"endpointUrl": "http://minio.store:9000", "region": "eu-west-1"},
        }
    )
    cron = next(d for d in docs if d["kind"] == "RayCronJob")
    head = cron["spec"]["jobTemplate"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in head["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.store:9000"
    assert env["AWS_DEFAULT_REGION"]["value"] == "eu-west-1"
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "ragc-secrets" and "value" not in env[name]


def test_the_grafana_dashboard_queries_only_metrics_the_service_records() -> None:
    import re

    assert not [d for d in render(BASE) if d["metadata"]["name"].endswith("-dashboard")]
    (config_map,) = [
        d
        for d in render({**BASE, "grafana": {"dashboard": {"enabled": True}}})
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["ragc.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    recorded = set(re.findall(r'"(ragc_[a-z_]+)"', (ROOT / "serve" / "metrics.py").read_text()))
    queried = {
        re.sub(r"_(total|bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"ray_(ragc_[a-z_]+)", e)
    }
    assert queried and queried <= recorded, queried - recorded  # Ray prefixes ray_; counters end in _total
    titles = " ".join(p["title"] for p in dashboard["panels"])
    for wanted in ("Queries per second", "p50", "p95", "Fallbacks", "Cache hit", "429", "tokens per tenant"):
        assert wanted in titles


def ray_pod_env(values: dict[str, Any]) -> dict[str, Any]:
    """The environment every Ray pod of the RayService gets (the same on the head and each worker group)."""
    service = next(d for d in render(values) if d["kind"] == "RayService")
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    workers = service["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    envs = [{e["name"]: e.get("value") for e in head["env"]}]
    envs += [{e["name"]: e.get("value") for e in w["template"]["spec"]["containers"][0]["env"]} for w in workers]
    assert all(env == envs[0] for env in envs[1:])  # the proxy on any pod, and every replica
    return envs[0]


def test_every_ray_pods_proxy_answers_a_lost_replicas_request_with_a_503() -> None:
    assert ray_pod_env(BASE).items() >= proxy_env().items()


def test_tracing_reaches_every_ray_pod_only_when_enabled() -> None:
    env_of = ray_pod_env
    assert "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH" not in env_of(BASE)
    endpoint = "http://otel-collector.observability:4318/v1/traces"
    env = env_of({**BASE, "tracing": {"enabled": True, "otlpEndpoint": endpoint, "samplingRatio": 0.25}})
    assert env["RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"] == EXPORTER_IMPORT_PATH
    assert env["RAY_SERVE_TRACING_SAMPLING_RATIO"] == "0.25" and env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == endpoint
    with pytest.raises(helm.HelmError, match="otlpEndpoint"):
        render({**BASE, "tracing": {"enabled": True}})


def test_the_bundled_stores_have_probes_and_redis_takes_the_password_from_the_secret() -> None:
    def containers(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
        docs = render({**values, "milvus": {"enabled": True}, "redis": {"enabled": True}})
        return {
            c["name"]: c
            for d in docs
            if d["kind"] in ("Deployment", "StatefulSet")
            for c in d["spec"]["template"]["spec"]["containers"]
        }

    secured = containers(BASE)
    for name in ("redis", "milvus"):
        assert secured[name]["readinessProbe"] and secured[name]["livenessProbe"], name
    redis = secured["redis"]
    assert redis["args"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert redis["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "ragc-secrets", "key": "redis-password"}
    dev = containers({"externalMilvus": BASE["externalMilvus"]})["redis"]  # no secret: a dev cluster, no auth
    assert "--requirepass" not in dev["args"] and "env" not in dev


def test_the_deadline_follows_the_config_tree_and_a_release_override() -> None:
    from serve.serve_config import PROXY_GRACE_S

    default = serve_config(render(BASE))["http_options"]["request_timeout_s"]
    assert default == RagcConfig().serve.request_timeout_s + PROXY_GRACE_S
    release = serve_config(render(BASE | {"ragcConfig": {"serve": {"request_timeout_s": 20}}}))
    assert release["http_options"]["request_timeout_s"] == 20 + PROXY_GRACE_S


def test_ragc_config_is_validated_by_the_config_trees_schema() -> None:
    with pytest.raises(helm.HelmError, match="modle") as refused:
        render(BASE | {"ragcConfig": {"serve": {"rerank": {"modle": "/models/x"}}}})
    assert "additional" in str(refused.value).lower() or "not allowed" in str(refused.value).lower()
    with pytest.raises(helm.HelmError, match="default_top_k"):
        render(BASE | {"ragcConfig": {"serve": {"default_top_k": "five"}}})


def test_every_ray_pod_exports_the_replicas_metrics_and_the_pod_monitor_scrapes_them() -> None:
    selected = {"release": "kube-prometheus-stack"}  # what the operator's podMonitorSelector picks
    docs = render(VALUE_SETS["gpu"] | {"podMonitor": {"enabled": True, "labels": selected}})
    cluster = next(d for d in docs if d["kind"] == "RayService")["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    assert len(groups) >= 2
    for group in groups:
        assert group["rayStartParams"]["metrics-export-port"] == "8080"
        ports = {p["name"]: p["containerPort"] for p in group["template"]["spec"]["containers"][0]["ports"]}
        assert ports["metrics"] == 8080
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    assert selected.items() <= monitor["metadata"]["labels"].items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    labels = cluster["headGroupSpec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


def pod_templates(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
    """(owner, labels) of every pod the release can create. A RayService's pods carry `ray.io/serve: "true"`
    once KubeRay finds their Serve proxy healthy (KubeRay sets it on RayService clusters only)."""
    found: list[tuple[str, dict[str, str]]] = []
    for doc in docs:
        owner = f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in ("Deployment", "StatefulSet"):
            found.append((owner, dict(doc["spec"]["template"]["metadata"]["labels"])))
        elif doc["kind"] in RAY_KINDS:
            spec = doc["spec"]
            cluster = (
                spec.get("rayClusterConfig") or spec.get("rayClusterSpec") or spec["jobTemplate"]["rayClusterSpec"]
            )
            extra = {"ray.io/serve": "true"} if doc["kind"] == "RayService" else {}
            for group in [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]:
                found.append((owner, dict(group["template"]["metadata"]["labels"]) | extra))
    return found


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    plain = selector.get("matchLabels", selector if "matchExpressions" not in selector else {})
    if not plain.items() <= labels.items():
        return False
    return all(
        labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []) if e["operator"] == "In"
    )


def test_traffic_and_disruption_budgets_reach_only_the_serving_pods() -> None:
    """The app Service routes only to the RayService's pods (never a reindex/sync job cluster or the bundled
    Milvus and Redis, which share the release's labels), each store's Service only to its store, the PDB counts
    only the serving workers and the PodMonitor scrapes only Ray pods."""
    docs = render(VALUE_SETS["jobs"])
    pods = pod_templates(docs)
    owners = {owner for owner, _ in pods}
    assert {"RayService rel-ragc", "RayJob rel-ragc-reindex", "RayCronJob rel-ragc-sync"} <= owners
    stores = {owner for owner in owners if owner.split()[0] in ("Deployment", "StatefulSet")}
    assert len(stores) == 2, owners  # the bundled Milvus and Redis
    selectors = {
        f"{d['kind']} {d['metadata']['name']}": d["spec"]["selector"]
        for d in docs
        if d["kind"] in ("Service", "PodDisruptionBudget", "PodMonitor")
    }
    matched = {name: {owner for owner, labels in pods if selects(sel, labels)} for name, sel in selectors.items()}
    assert matched.pop("PodMonitor rel-ragc") == owners - stores
    for name, targets in matched.items():
        assert len(targets) == 1, f"{name} selects pods of {sorted(targets)}"
    assert matched["Service rel-ragc"] == {"RayService rel-ragc"}
    assert matched["PodDisruptionBudget rel-ragc-workers"] == {"RayService rel-ragc"}
    app = selectors["Service rel-ragc"]
    workers = [labels for owner, labels in pods if owner == "RayService rel-ragc"]
    assert sum(selects(app, labels) for labels in workers) == len(workers)  # every serving pod with a proxy
    assert not any(selects(app, labels | {"ray.io/serve": "false"}) for labels in workers)  # not an unhealthy one
