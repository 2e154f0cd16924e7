"""Real parts: a milvus-lite server process, a redis-server, local Ray, the packaged MiniLM model."""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from cluster.config import EmbeddingConfig, RagcConfig
from local.otlp import OtlpReceiver
from local.sidecars import start_milvus, start_redis, stop

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("milvus")
    record = start_milvus(root / "data", "127.0.0.1", free_port(), root / "logs", timeout_s=120)
    yield record
    stop(record)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (apt-get install redis-server; .ci/run does)", pytrace=False)
    root = tmp_path_factory.mktemp("redis")
    record = start_redis("127.0.0.1", free_port(), root / "logs", timeout_s=30)
    assert record is not None
    yield record
    stop(record)


@pytest.fixture(scope="session")
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """Where every process of the session's Ray exports spans: set before Ray starts, so its workers
    inherit it. Tracing is thereby on for every Serve app of the tier (the proxy reads only the environment),
    so every integration test also runs with it."""
    from cluster.config import TracesConfig
    from serve.edge.lost_replica import proxy_env
    from serve.tracing import tracing_env

    receiver = OtlpReceiver()
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = receiver.endpoint
    os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"  # vLLM's own exporter defaults to gRPC
    os.environ.update(tracing_env(TracesConfig(enabled=True)))
    os.environ.update(proxy_env())  # as the local host and the chart set it: a lost replica's request is a 503
    yield receiver
    receiver.close()


@pytest.fixture(scope="session")
def ray_session(otlp_receiver: OtlpReceiver) -> Iterator[int]:
    """Local Ray for the session; yields the port its metrics agent serves Prometheus metrics on."""
    import ray

    port = free_port()
    start_session_ray(port)
    yield port
    ray.shutdown()


def start_session_ray(metrics_port: int) -> None:
    """The session's single local node (also brought back by a module that ran on a Ray of its own)."""
    from cluster.ray_runtime import ensure_ray

    ensure_ray(RagcConfig.model_validate({"ray": {"num_cpus": 2, "metrics_export_port": metrics_port}}))


def another_models_label(cfg: RagcConfig) -> EmbeddingConfig:
    """The configured weights served under another model's id (a packaged model refuses a foreign id, so they
    are named by their folder): what a collection built by that other model must refuse."""
    from cluster.models import resolve_model_path

    named = {"model": resolve_model_path(cfg.embedding.model), "model_id": "BAAI/bge-small-en-v1.5"}
    return EmbeddingConfig.model_validate(cfg.embedding.model_dump() | named)


def make_config(milvus: dict[str, Any], redis: dict[str, Any] | None, state_dir: Path, **overrides: Any) -> RagcConfig:
    data: dict[str, Any] = {
        "state_dir": str(state_dir),
        "milvus": {"uri": milvus["uri"], "collection": f"t_{uuid.uuid4().hex[:10]}"},
        "redis": {"url": redis["url"]} if redis else {"enabled": False},
        "ray": {"num_cpus": 2},
        "chunking": {"chunk_size": 128, "chunk_overlap": 16},
        "ingest": {"upsert_batch_size": 4},
    }
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value}
    return RagcConfig.model_validate(data)


@pytest.fixture
def cfg(
    milvus_server: dict[str, Any], redis_server: dict[str, Any], tmp_path: Path, ray_session: int
) -> Iterator[RagcConfig]:
    """A fresh collection alias and an empty Redis per test, on the shared servers; the test's collections
    are dropped after it."""
    import redis

    redis.Redis.from_url(redis_server["url"]).flushdb()
    made = make_config(milvus_server, redis_server, tmp_path / "state")
    yield made
    drop_collections(made)


def drop_collections(cfg: RagcConfig) -> None:
    """Every collection under the config's alias (generations and their ledgers) and the alias itself. Left
    behind, they stay loaded in the session's milvus-lite server: late in the tier it held dozens, and the
    reindex-under-load test's searches missed their deadlines there, never when run alone."""
    from pymilvus import MilvusException

    from cluster.store.client import connect

    alias = cfg.milvus.collection
    client = connect(cfg)
    try:
        with suppress(MilvusException):  # none when the test never wrote
            client.drop_alias(alias)
        for name in client.list_collections():
            if name == alias or name.startswith(f"{alias}_"):
                client.drop_collection(name)
    finally:
        client.close()
