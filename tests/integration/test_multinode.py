"""A head and two worker nodes on this machine (`local/nodes.py`): the expensive query stage scales out
under load and back in after it while the cheap ones stay put; the ingestion job spreads its embedding
actors over the nodes and keeps the exact chunk set when a node is lost mid-job.

This module runs on a Ray of its own; the session's single node is stopped for it and started again after."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster.config import DeploymentConfig, RagcConfig
from cluster.store.client import connect
from cluster.store.expr import eq
from cluster.store.schema import ChunkFields
from ingest_jobs.sync import SyncReport, run_sync
from local.nodes import LocalNodes, start_local_nodes, worker_name
from tests.eval.conftest import SCIFACT
from tests.integration.conftest import free_port, start_session_ray
from tests.integration.test_ingest import rows_of

WORKERS = 2
CPUS_PER_WORKER = 2
DOCS = 200  # SciFact abstracts: about 700 chunks, long enough a job to lose a node in the middle of it


@pytest.fixture(scope="module")
def nodes(ray_session: int) -> Iterator[LocalNodes]:
    import ray

    ray.shutdown()
    local = start_local_nodes(WORKERS, CPUS_PER_WORKER)
    ray.init(address=local.address, logging_level=logging.WARNING, log_to_driver=False)
    yield local
    ray.shutdown()
    local.shutdown()
    start_session_ray(ray_session)


@pytest.fixture
def spread_cfg(cfg: RagcConfig) -> RagcConfig:
    """Two embedding actors; no shared embedding cache, so every run embeds and takes as long as the first."""
    out = cfg.model_copy(deep=True)
    out.ingest.embed_actors_min = out.ingest.embed_actors_max = 2
    out.ingest.embed_batch_rows = 32  # a few dozen batches, so that both actors get work
    out.redis.enabled = False
    return out


def running_replicas(app: str) -> dict[str, int]:
    from ray import serve

    deployments = serve.status().applications[app].deployments
    return {name: d.replica_states.get("RUNNING", 0) for name, d in deployments.items()}


@pytest.fixture
def scaling_app(nodes: LocalNodes, cfg: RagcConfig) -> Iterator[str]:
    """Rerank is the expensive stage (a MiniLM cross-encoder over 30 pairs per question, about 1.5 s on
    these cores) and may take 3 replicas at one request each; retrieval may take 3 at eight each. Both
    react within seconds (a 5 s look-back) so the test sees both directions."""
    from ray import serve

    from local.cluster import DEMO_CORPUS
    from local.http_wait import wait_for_http
    from serve.app import build_app

    run_sync(cfg, DEMO_CORPUS, "acme")
    app_cfg = cfg.model_copy(deep=True)
    app_cfg.serve.auth.enabled, app_cfg.serve.auth.single_tenant = False, "acme"
    app_cfg.serve.llm.enabled = False
    app_cfg.serve.cache.enabled = False
    app_cfg.serve.rerank.model = "packaged:all-MiniLM-L6-v2"  # an untrained head: its cost is what matters here
    app_cfg.serve.rerank.timeout_s = 120.0
    quick = {"upscale_delay_s": 1.0, "downscale_delay_s": 3.0, "look_back_period_s": 5.0, "metrics_interval_s": 1.0}
    app_cfg.serve.deployments["rerank"] = DeploymentConfig(
        max_replicas=3, target_ongoing_requests=1, num_cpus=1, **quick
    )
    app_cfg.serve.deployments["retrieve"] = DeploymentConfig(max_replicas=3, target_ongoing_requests=8, **quick)
    port = free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(app_cfg), name="scaling", route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(base + "/readyz", timeout_s=300)
    yield base
    serve.shutdown()


def test_the_expensive_stage_scales_out_under_load_and_back_in_after(scaling_app: str) -> None:
    questions = [
        "How are tenants kept apart?",
        "What happens when a document is edited?",
        "How does the reindex job avoid downtime?",
        "How is Redis used?",
        "What does the embedding cache store?",
        "How are answers cited?",
    ]
    stop = threading.Event()
    statuses: list[tuple[int, str]] = []

    def closed_loop(n: int) -> None:
        with httpx.Client(base_url=scaling_app, timeout=180) as client:
            while not stop.is_set():
                response = client.post("/v1/query", json={"query": questions[n], "rerank": True})
                rerank = response.json()["stages"]["rerank"]["status"] if response.status_code == 200 else ""
                statuses.append((response.status_code, rerank))

    started = time.monotonic()
    timeline: list[tuple[float, int, int]] = []

    def sample() -> dict[str, int]:
        replicas = running_replicas("scaling")
        timeline.append((round(time.monotonic() - started, 1), replicas["rerank"], replicas["retrieve"]))
        return replicas

    assert sample()["rerank"] == 1
    clients = [threading.Thread(target=closed_loop, args=(n,)) for n in range(len(questions))]
    for client in clients:
        client.start()
    try:
        deadline = time.monotonic() + 180
        while sample()["rerank"] < 3 and time.monotonic() < deadline:
            time.sleep(1.0)
    finally:
        stop.set()
        for client in clients:
            client.join()
    load_stopped = time.monotonic() - started
    deadline = time.monotonic() + 180
    while sample()["rerank"] > 1 and time.monotonic() < deadline:
        time.sleep(1.0)
    print(json.dumps({"load_stopped_s": round(load_stopped, 1), "timeline (s, rerank, retrieve)": timeline}))

    assert max(r for _, r, _ in timeline) == 3, "rerank went from one replica to its maximum under the load"
    assert timeline[-1][1] == 1, "and back to one after the load stopped"
    assert max(r for _, _, r in timeline) == 1, "retrieval, far below its target, never scaled with rerank"
    assert statuses and all(code == 200 for code, _ in statuses), statuses
    assert sum(rerank == "ok" for _, rerank in statuses) > len(statuses) / 2, statuses


def scifact_slice(root: Path, docs: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with (SCIFACT / "corpus.part1.jsonl").open(encoding="utf-8") as corpus:
        (root / "corpus.jsonl").write_text("".join(islice(corpus, docs)), encoding="utf-8")
    return root


def chunk_ids(cfg: RagcConfig, tenant: str) -> list[str]:
    return sorted(r["id"] for r in rows_of(cfg, tenant))


def stored_rows(cfg: RagcConfig, tenant: str) -> int:
    client = connect(cfg)
    try:
        if not client.has_collection(cfg.milvus.collection):  # the job has not created it yet
            return 0
        out = client.query(cfg.milvus.collection, filter=eq(ChunkFields.TENANT, tenant), output_fields=["count(*)"])
        return int(out[0]["count(*)"])
    finally:
        client.close()


def test_ingest_spreads_over_two_nodes_and_keeps_the_exact_chunks_when_one_is_lost(
    nodes: LocalNodes, spread_cfg: RagcConfig, tmp_path: Path
) -> None:
    corpus = scifact_slice(tmp_path / "docs", DOCS)
    reference = spread_cfg.model_copy(deep=True)
    reference.milvus.collection += "_ref"
    whole = run_sync(reference, corpus, "acme")
    assert whole.failed == 0 and whole.chunks_total > 0
    assert set(whole.chunks_by_node) == {worker_name(0), worker_name(1)}, whole.chunks_by_node
    assert sum(whole.chunks_by_node.values()) == whole.chunks_upserted == whole.chunks_total
    wanted = chunk_ids(reference, "acme")

    outcome: dict[str, Any] = {}

    def ingest() -> None:
        try:
            outcome["report"] = run_sync(spread_cfg, corpus, "acme")
        except Exception as exc:  # the job may fail on the lost node; the re-run below must then complete it
            outcome["error"] = exc

    job = threading.Thread(target=ingest)
    job.start()
    deadline = time.monotonic() + 300
    while stored_rows(spread_cfg, "acme") == 0 and job.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    landed_before_kill = stored_rows(spread_cfg, "acme")
    assert job.is_alive() and 0 < landed_before_kill < len(wanted), "the node is lost in the middle of the job"
    lost_at = time.monotonic()
    nodes.kill(worker_name(1))
    job.join(timeout=600)
    assert not job.is_alive()
    finished_s = time.monotonic() - lost_at

    if "error" in outcome:  # a clear reason, then a re-run on the surviving node completes it
        print(f"the job failed after losing {worker_name(1)}: {outcome['error']!r}")
        report: SyncReport = run_sync(spread_cfg, corpus, "acme")
        assert report.failed == 0
    else:
        report = outcome["report"]
        assert report.failed == 0 and report.added == DOCS
    ids = chunk_ids(spread_cfg, "acme")
    assert ids == wanted, "exactly the chunks of an uninterrupted run: none lost, none duplicated"
    assert report.chunks_total == len(wanted)
    print(
        json.dumps(
            {
                "chunks": len(wanted),
                "landed_before_kill": landed_before_kill,
                "finished_after_kill_s": round(finished_s, 1),
                "outcome": "failed, re-run completed" if "error" in outcome else "finished on the surviving node",
                "by_node": report.chunks_by_node,
            }
        )
    )
