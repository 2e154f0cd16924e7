"""A head and two worker nodes on this machine (`local/nodes.py`): the ingestion job asks Ray to spread its
embedding actors over the nodes and keeps the exact chunk set when a node is lost mid-job (a replacement joins
after); the expensive query stage scales out under load and back in after it while the cheap ones stay
put; `ragc bench profile` names the bottleneck stage.

This module runs on a Ray of its own; the session's single node is stopped for it and started again after."""

from __future__ import annotations

import csv
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from bench.query import running_replicas
from cluster.config import DeploymentConfig, RagcConfig
from cluster.ray_runtime import NODE_LABEL
from cluster.store.client import connect
from cluster.store.expr import eq
from cluster.store.schema import ChunkFields
from ingest_jobs.embed_stage import ChunkEmbedder
from ingest_jobs.loaders import scan
from ingest_jobs.pipeline import ERROR_COLUMN, parse_and_chunk
from ingest_jobs.sync import SyncReport, run_sync
from local.nodes import LocalNodes, start_local_nodes, worker_name
from tests.eval.conftest import SCIFACT
from tests.integration.conftest import free_port, make_config, start_session_ray
from tests.integration.test_ingest import rows_of
from tests.integration.test_resilience import LoadLoop, Outcome, lost_replica

QUESTIONS = [
    "How are tenants kept apart?",
    "What happens when a document is edited?",
    "How does the reindex job avoid downtime?",
    "How is Redis used?",
    "What does the embedding cache store?",
    "How are answers cited?",
]
WORKERS = 2
CPUS_PER_WORKER = 2
DOCS = 120  # SciFact abstracts: about 400 chunks, long enough a job to lose a node in the middle of it


@pytest.fixture(scope="module")
def nodes(ray_session: int) -> Iterator[LocalNodes]:
    import ray

    ray.shutdown()
    # the session's Ray comes back however this module ends, its nodes' start included: a worker that once did
    # not start left the later modules a Ray without the session's metrics port (CI, 2026-12-06)
    try:
        local = start_local_nodes(WORKERS, CPUS_PER_WORKER)
        try:
            ray.init(address=local.address, logging_level=logging.WARNING, log_to_driver=False)
            yield local
        finally:
            ray.shutdown()
            local.shutdown()
    finally:
        start_session_ray(ray_session)


@pytest.fixture
def spread_cfg(cfg: RagcConfig) -> RagcConfig:
    """Two embedding actors; no shared embedding cache, so a re-run after a failed job embeds what it writes."""
    out = cfg.model_copy(deep=True)
    out.ingest.embed_actors_min = out.ingest.embed_actors_max = 2
    out.ingest.embed_batch_rows = 32  # a few dozen batches, so that both actors get work
    out.redis.enabled = False
    return out


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


def expected_chunk_ids(cfg: RagcConfig, corpus: Path, tenant: str) -> list[str]:
    """The chunk ids an uninterrupted job writes: the job's own parse-and-chunk step over the same files."""
    documents = scan(corpus, cfg.ingest.max_file_bytes).documents
    rows = [
        row
        for doc in documents
        for row in parse_and_chunk({"doc": doc.to_json()}, cfg.chunking, cfg.embedding.model, tenant)
    ]
    assert rows and not any(row[ERROR_COLUMN] for row in rows)
    return sorted(row["id"] for row in rows)


def embedding_actor_nodes() -> list[str]:
    """The nodes (their `ragc.io/node` label) of the ingest job's live embedding actors, which Ray Data names
    `MapWorker(MapBatches(<class>))`. Read from the GCS: the state API needs the dashboard, which these nodes
    leave out."""
    import ray
    from ray._private import state

    names = {node["NodeID"]: node["Labels"].get(NODE_LABEL, "") for node in ray.nodes()}
    actors = state.actors().values()
    return sorted(
        names.get(a["Address"]["NodeID"], "")
        for a in actors
        if f"({ChunkEmbedder.__name__})" in a["ActorClassName"] and a["State"] == "ALIVE"
    )


def test_ingest_over_two_nodes_keeps_the_exact_chunks_when_a_node_with_an_embedder_is_lost(
    nodes: LocalNodes, spread_cfg: RagcConfig, tmp_path: Path
) -> None:
    corpus = scifact_slice(tmp_path / "docs", DOCS)
    wanted = expected_chunk_ids(spread_cfg, corpus, "acme")

    outcome: dict[str, Any] = {}

    def ingest() -> None:
        try:
            outcome["report"] = run_sync(spread_cfg, corpus, "acme")
        except Exception as exc:  # the job may fail on the lost node; the re-run below must then complete it
            outcome["error"] = exc

    job = threading.Thread(target=ingest)
    job.start()
    deadline = time.monotonic() + 300
    placed: list[str] = []
    seen: list[list[str]] = []  # each distinct placement polled, for the message when the actors never showed
    while job.is_alive() and time.monotonic() < deadline:
        if len(placed) < 2:
            placed = embedding_actor_nodes()
            if not seen or seen[-1] != placed:
                seen.append(placed)
        elif stored_rows(spread_cfg, "acme") > 0:
            break
        time.sleep(0.2)
    assert len(placed) == 2, f"both embedding actors came up before the job ended; polled {seen}"
    # The pool asks for SPREAD, which Ray honours on a best-effort basis: on a loaded machine a stale view
    # of a node's free CPUs can put both actors on one. The node lost is then the one holding both.
    lost = worker_name(1) if worker_name(1) in placed else placed[0]
    landed_before_kill = stored_rows(spread_cfg, "acme")
    assert job.is_alive() and 0 < landed_before_kill < len(wanted), "the node is lost in the middle of the job"
    lost_at = time.monotonic()
    nodes.kill(lost)
    job.join(timeout=600)
    assert not job.is_alive()
    finished_s = time.monotonic() - lost_at
    replacement = nodes.add_worker()  # as a cluster autoscaler would; the tests after this one need two workers

    if "error" in outcome:  # a clear reason, then a re-run on the surviving node completes it
        print(f"the job failed after losing {lost}: {outcome['error']!r}")
        report: SyncReport = run_sync(spread_cfg, corpus, "acme")
        assert report.failed == 0
    else:
        report = outcome["report"]
        assert report.failed == 0 and report.added == DOCS
    ids = chunk_ids(spread_cfg, "acme")
    assert ids == wanted, "exactly the chunks of an uninterrupted run: none lost, none duplicated"
    assert report.chunks_total == len(wanted)
    assert set(report.chunks_by_node) <= {worker_name(0), worker_name(1), replacement}, report.chunks_by_node
    print(
        json.dumps(
            {
                "chunks": len(wanted),
                "actors_on": placed,
                "lost": lost,
                "landed_before_kill": landed_before_kill,
                "finished_after_kill_s": round(finished_s, 1),
                "outcome": "failed, re-run completed" if "error" in outcome else "finished on the surviving node",
                "by_node": report.chunks_by_node,
                "replacement": replacement,
            }
        )
    )


@pytest.fixture(scope="module")
def scaling_app(
    nodes: LocalNodes,
    milvus_server: dict[str, Any],
    redis_server: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """Rerank is the expensive stage (a MiniLM cross-encoder over `serve.rerank.depth` pairs per question, 20
    by default; 30 took about 1.5 s on these cores) and may take 3 replicas at one request each; retrieval
    may take 3 at eight each. Both react within seconds (a 5 s look-back) so the test sees both directions."""
    from ray import serve

    from local.cluster import DEMO_CORPUS
    from local.http_wait import wait_for_http
    from serve.app import build_app

    # these tests need both workers: in one CI simulation the replacement started by the ingest test lost its
    # raylet seconds after it joined (killed, with nothing in its log), and rerank could not place its
    # third replica for three minutes
    replaced = nodes.replace_dead_workers()
    if replaced:
        print(f"workers lost before the scaling tests, replaced: {replaced}")
    cfg = make_config(milvus_server, redis_server, tmp_path_factory.mktemp("scaling") / "state")
    run_sync(cfg, DEMO_CORPUS, "acme")
    app_cfg = cfg.model_copy(deep=True)
    app_cfg.serve.auth.enabled, app_cfg.serve.auth.single_tenant = False, "acme"
    app_cfg.serve.llm.enabled = False
    app_cfg.serve.cache.enabled = False
    app_cfg.serve.rerank.model = "packaged:all-MiniLM-L6-v2"  # an untrained head: its cost is what matters here
    app_cfg.serve.rerank.timeout_s = 120.0
    # what is measured is how rerank scales, not how fast milvus-lite answers on 2 busy cores: in a CI
    # simulation (2026-12-05) both arms missed the 3 s search deadline once under this load
    app_cfg.serve.retrieve.search_timeout_s, app_cfg.serve.retrieve.timeout_s = 20.0, 25.0
    quick = {"upscale_delay_s": 1.0, "downscale_delay_s": 3.0, "look_back_period_s": 5.0, "metrics_interval_s": 1.0}
    app_cfg.serve.deployments["rerank"] = DeploymentConfig(
        max_replicas=3, target_ongoing_requests=1, num_cpus=1, **quick
    )
    # two ingress and two retrieval replicas on separate nodes, as a cluster that must survive a node runs them:
    # a lost worker takes at most one of each (with one, its loss stopped every answer until the replica was
    # rescheduled: 408 refusals against 25 answers in a CI run on a slow machine)
    spread = {"min_replicas": 2, "max_replicas_per_node": 1}
    app_cfg.serve.deployments["retrieve"] = DeploymentConfig(
        max_replicas=3, target_ongoing_requests=8, **spread, **quick
    )
    app_cfg.serve.deployments["ingress"] = app_cfg.serve.deployments["ingress"].model_copy(update=spread)
    port = free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(app_cfg), name="scaling", route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(base + "/readyz", timeout_s=300)
    for stage in ("ingress", "retrieve"):  # ready takes one of each; the tests start from both
        wait_for_replicas(stage, lambda n: n == 2, timeout_s=180)
    yield base
    serve.shutdown()


def answered(load: LoadLoop) -> list[tuple[float, int, str]]:
    """Each response of the load so far: when it arrived, its code and what the rerank stage did."""
    return [
        (o.started + o.seconds, o.status, o.body.get("stages", {}).get("rerank", {}).get("status", ""))
        for o in list(load.outcomes)
    ]


def not_ready(o: Outcome) -> bool:
    """The ingress readiness gate's refusal while the retrieval stage is unreachable: 503, Retry-After."""
    return o.status == 503 and "service not ready" in str(o.body.get("error")) and o.retry_after is not None


def wait_for_replicas(stage: str, wanted: Callable[[int], bool], timeout_s: float) -> float:
    """Seconds until `wanted(running replicas of stage)`; fails the test past `timeout_s`."""
    started = time.monotonic()
    while not wanted(running_replicas("scaling")[stage]):
        assert time.monotonic() - started < timeout_s, f"{stage}: {running_replicas('scaling')}"
        time.sleep(1.0)
    return time.monotonic() - started


def wait_until_marked_dead(node_id: str, timeout_s: float) -> None:
    """Until the GCS lists the node as dead: it finds a SIGKILLed raylet by missed health checks, seconds later."""
    import ray

    started = time.monotonic()
    while any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
        assert time.monotonic() - started < timeout_s, f"node {node_id} is still alive for the GCS"
        time.sleep(1.0)


def test_the_expensive_stage_scales_out_under_load_and_back_in_after(scaling_app: str) -> None:
    started = time.monotonic()
    timeline: list[tuple[float, int, int]] = []

    def sample() -> dict[str, int]:
        replicas = running_replicas("scaling")
        timeline.append((round(time.monotonic() - started, 1), replicas["rerank"], replicas["retrieve"]))
        return replicas

    assert sample()["rerank"] == 1
    with LoadLoop(scaling_app + "/v1/query", workers=len(QUESTIONS)) as load:
        deadline = time.monotonic() + 180
        while sample()["rerank"] < 3 and time.monotonic() < deadline:
            time.sleep(1.0)
    load_stopped = time.monotonic() - started
    deadline = time.monotonic() + 180
    while sample()["rerank"] > 1 and time.monotonic() < deadline:
        time.sleep(1.0)
    print(json.dumps({"load_stopped_s": round(load_stopped, 1), "timeline (s, rerank, retrieve)": timeline}))

    assert max(r for _, r, _ in timeline) == 3, "rerank went from one replica to its maximum under the load"
    assert timeline[-1][1] == 1, "and back to one after the load stopped"
    assert {r for _, _, r in timeline} == {2}, "retrieval, far below its target, stayed at its minimum of two"
    statuses = [(code, rerank) for _, code, rerank in answered(load)]
    refused = [(round(o.started - started, 1), o.status, o.body) for o in load.outcomes if o.status != 200]
    assert statuses and not refused, (len(statuses), refused[:5], timeline)
    assert sum(rerank == "ok" for _, rerank in statuses) > len(statuses) / 2, statuses


def test_losing_a_worker_under_load_keeps_answering_and_recovers(scaling_app: str, nodes: LocalNodes) -> None:
    """Three rerank replicas need both 2-CPU workers, so the lost worker takes at least one of them (and
    whatever else Serve put there). Requests keep getting answers (a rerank that died mid-request falls
    back to the fused order) or the documented 503 while a lost retrieval replica is rescheduled; Serve
    reschedules what fits on the survivor, and the rest once a replacement joins. A request in flight on
    a lost ingress replica, which Serve's proxy cannot retry (seen in a CI run: 4 of 73, one per client, as
    500s before serve/edge/lost_replica.py), or sent to it before the router noticed, gets a 503 with
    Retry-After saying its replica was lost."""
    with LoadLoop(scaling_app + "/v1/query", workers=4) as load:
        wait_for_replicas("rerank", lambda n: n == 3, timeout_s=180)
        lost = max(nodes.workers, key=lambda name: int(name.rsplit("-", 1)[1]))
        lost_id = nodes.workers[lost].node_id
        lost_at = time.monotonic()
        nodes.kill(lost)
        deadline = lost_at + 180
        while True:  # recovered: the last five answers, all sent after the loss, were reranked
            after = [r for t, _, r in answered(load) if t > lost_at + 1.0][-5:]
            if len(after) == 5 and all(r == "ok" for r in after):
                break
            assert time.monotonic() < deadline, answered(load)[-10:]
            time.sleep(0.5)
        recovered_s = time.monotonic() - lost_at
        # until the GCS declares the node dead, Serve counts the replicas it held as running: without this wait
        # the test could end first, and Serve moved them during the next test (a CI simulation, 2026-12-06: the
        # profile below then measured retrieval replicas being rescheduled, and named retrieve its bottleneck)
        wait_until_marked_dead(lost_id, timeout_s=180)
        marked_dead_s = time.monotonic() - lost_at
        replacement = nodes.add_worker()
        wait_for_replicas("rerank", lambda n: n == 3, timeout_s=180)
        rescheduled_s = time.monotonic() - lost_at
    codes = Counter(code for _, code, _ in answered(load))
    since_loss = Counter(r for t, _, r in answered(load) if t > lost_at)
    in_flight = [o for o in load.outcomes if o.started < lost_at < o.started + o.seconds]
    failed = [o for o in load.outcomes if o.status != 200]
    print(
        json.dumps(
            {
                "lost": lost,
                "replacement": replacement,
                "answers_reranked_again_after_s": round(recovered_s, 1),
                "marked_dead_after_s": round(marked_dead_s, 1),
                "three_rerank_replicas_again_after_s": round(rescheduled_s, 1),
                "codes": codes,
                "rerank_since_loss": since_loss,
                "in_flight_at_the_loss": len(in_flight),
                "lost_replica_503s_sent_at_s": [round(o.started - lost_at, 1) for o in failed if lost_replica(o)],
            }
        )
    )
    # A request sent to a lost ingress replica before Serve's router noticed the loss meets the same 503
    # (seen in CI: one sent 0-2 s after the kill); none may meet it once the service has recovered.
    unexplained = [o for o in failed if not (lost_replica(o) and o.started < lost_at + recovered_s)]
    unexplained = [
        o for o in unexplained if not (o.status == 503 and "retrieval unavailable" in o.body.get("error", ""))
    ]
    # while a lost retrieval replica is rescheduled the readiness gate may refuse first (seen in CI sim 25)
    unexplained = [o for o in unexplained if not (not_ready(o) and o.started < lost_at + recovered_s)]
    assert not unexplained, [(o.status, o.body) for o in unexplained]
    assert codes[200] > len(failed), codes


def test_the_profile_names_rerank_as_the_bottleneck_and_writes_its_csv_and_charts(
    scaling_app: str, tmp_path: Path
) -> None:
    from bench.profile import bench_profile

    (tmp_path / "queries.jsonl").write_text("".join(json.dumps({"text": q}) + "\n" for q in QUESTIONS * 4))
    out = tmp_path / "profile"
    assert bench_profile(scaling_app, tmp_path, ["default", "no_rerank"], [1, 2], 4.0, out) == 0
    with (out / "profile.csv").open(encoding="utf-8") as handle:
        rows = {(r["variant"], int(r["concurrency"])): r for r in csv.DictReader(handle)}
    assert set(rows) == {("default", 1), ("default", 2), ("no_rerank", 1), ("no_rerank", 2)}
    for (variant, _), row in rows.items():
        assert int(row["requests"]) > 0 and int(row["errors"]) == 0 and float(row["throughput_rps"]) > 0, row
        assert (row["bottleneck"] == "rerank") == (variant == "default"), row
        assert float(row["retrieve_p50_ms"]) > 0
    assert all((out / name).stat().st_size > 10_000 for name in ("profile_stage_latency.png", "profile_throughput.png"))
