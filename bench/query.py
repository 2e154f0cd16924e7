"""`ragc bench query --dataset DIR`: this Serve app against the seed's llama-index reference pipeline.

Both run over the same Milvus collection, question set and cross-encoder, one after the other, each
loaded by the same closed-loop client pool for the same time. Printed: QPS and p50/p95 of ours / the
reference, end-to-end p50 / sum of per-stage p50 (framework overhead), and the resident memory of the
whole local cluster (sidecars, Ray, replicas, this process) idle and under load."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from math import inf
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from bench.ingest import write_subset
from bench.memory import MB, PeakMemory, total_rss
from bench.sampling import BackgroundSampler
from cluster.config import RagcConfig
from cluster.ray_runtime import ensure_ray
from ingest_jobs.sync import run_sync
from local.http_wait import wait_for_http

BENCH_TENANT = "bench"
BENCH_SOURCE = "bench_subset"
READY_TIMEOUT_S = 300.0
WARM_UP_S = 20.0
MAX_WARM_UP_S = 240.0  # the latest the Serve app's measured window opens while its replicas still change


@dataclass
class LoadResult:
    name: str
    seconds: float
    clients: int
    latencies_s: list[float] = field(default_factory=list)
    failures: int = 0
    failure_codes: dict[str, int] = field(default_factory=dict)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)
    cache_hits: int = 0
    # per answer: its end-to-end seconds and the ms of each stage that ran (where a slow answer lost time)
    answers: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    warm_up_s: float = 0.0  # load before the measured window opened
    warm_up_latencies_s: list[float] = field(default_factory=list)  # answers before it (a scale-out's cost)
    settled: bool = True  # False: the window opened at its latest, with the replicas still changing

    @property
    def qps(self) -> float:
        return len(self.latencies_s) / self.seconds

    @property
    def closed_loop_qps(self) -> float:
        """Little's law for a closed loop without think time: clients / mean latency. It agrees with the
        counted QPS when the window is long against the latency; a gap says the window is too short."""
        return self.clients / float(np.mean(self.latencies_s)) if self.latencies_s else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "qps": round(self.qps, 2),
            "qps_clients_over_mean_latency": round(self.closed_loop_qps, 2),
            "p50_ms": round(self.pct(50) * 1000, 1),
            "p95_ms": round(self.pct(95) * 1000, 1),
            "failures": self.failures,
            "failure_codes": self.failure_codes,
        }

    def pct(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q)) if self.latencies_s else float("nan")

    def time_split(self, above_pct: float = 0.0) -> dict[str, float]:
        """Mean ms per stage over the answers slower than the `above_pct` percentile (0: every answer),
        and `outside_stages`: end to end minus the stages' sum (the proxy, the ingress's queue, the client)."""
        floor = self.pct(above_pct) if above_pct else 0.0
        chosen = [(seconds, stages) for seconds, stages in self.answers if seconds >= floor]
        if not chosen:
            return {}
        names = sorted({name for _, stages in chosen for name in stages})
        split = {name: float(np.mean([stages.get(name, 0.0) for _, stages in chosen])) for name in names}
        split["end_to_end"] = float(np.mean([seconds * 1000 for seconds, _ in chosen]))
        split["outside_stages"] = split["end_to_end"] - sum(split[name] for name in names)
        return {name: round(ms, 1) for name, ms in split.items()} | {"answers": len(chosen)}


@dataclass
class MeasuredWindow:
    """Which answers count: those that arrive in `duration_s` after a warm-up of at least `warm_up_s`.

    With `changed_at` (when the app's replicas last changed), the window opens only once the replicas have
    been unchanged for `quiet_s` (long enough for the autoscaler to have acted on the full load: see
    `autoscaler_quiet_s`) and every request in flight started after that change, so no counted answer waited
    behind a scale-out; at the latest it opens at `max_warm_up_s`, unsettled. Times are
    `time.perf_counter()` seconds."""

    duration_s: float
    warm_up_s: float = 0.0
    changed_at: Callable[[], float] | None = None
    quiet_s: float = 0.0
    max_warm_up_s: float = MAX_WARM_UP_S
    began: float = 0.0
    start: float = inf
    stop: float = inf
    settled: bool = False

    def begin(self, now: float) -> None:
        self.began = now
        if self.changed_at is None:
            self._open(now + self.warm_up_s, settled=True)

    def poll(self, now: float, in_flight_since: Iterable[float]) -> None:
        """Opens the window when the replicas have settled; call it while the load runs."""
        if self.start < inf or now < self.began + self.warm_up_s or self.changed_at is None:
            return
        changed = self.changed_at()
        if now - changed >= self.quiet_s and all(started >= changed for started in in_flight_since):
            self._open(now, settled=True)
        elif now >= self.began + self.max_warm_up_s:
            self._open(now, settled=False)

    def _open(self, at: float, settled: bool) -> None:
        self.start, self.stop, self.settled = at, at + self.duration_s, settled

    def running(self, now: float) -> bool:
        return now < self.stop

    def counts(self, finished: float) -> bool:
        return self.start <= finished <= self.stop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def load_questions(dataset: Path, limit: int) -> list[str]:
    questions = []
    with (dataset / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                questions.append(json.loads(line)["text"])
            if limit and len(questions) >= limit:
                break
    return questions


async def closed_loop(
    url: str,
    questions: list[str],
    clients: int,
    duration_s: float,
    name: str,
    warm_up_s: float = 0.0,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    replicas_changed_at: Callable[[], float] | None = None,
    replicas_quiet_s: float = 0.0,
) -> LoadResult:
    """`clients` workers, each sending its next question (with `body`'s other fields) as soon as the previous
    answer arrived.

    The load runs continuously through the warm-up and the measured window (`MeasuredWindow`); only answers
    that arrive in the window count, so it starts in a steady state rather than with every client firing at
    once, or, with `replicas_changed_at`, with answers queued behind a scale-out."""
    result = LoadResult(name, duration_s, clients)
    window = MeasuredWindow(duration_s, warm_up_s, replicas_changed_at, replicas_quiet_s)
    window.begin(time.perf_counter())
    in_flight: dict[int, float] = {}
    limits = httpx.Limits(max_connections=clients * 2)

    def failed(code: str) -> None:
        result.failures += 1
        result.failure_codes[code] = result.failure_codes.get(code, 0) + 1

    async def open_window() -> None:
        while window.start == inf:
            window.poll(time.perf_counter(), in_flight.values())
            await asyncio.sleep(0.5)

    async def worker(offset: int) -> None:
        n = offset
        async with httpx.AsyncClient(timeout=120.0, limits=limits, headers=headers) as client:
            while window.running(time.perf_counter()):
                started = in_flight[offset] = time.perf_counter()
                question = questions[n % len(questions)]
                n += clients
                try:
                    response = await client.post(url, json=(body or {}) | {"query": question})
                except httpx.HTTPError as exc:
                    failed(type(exc).__name__)
                    continue
                finally:
                    del in_flight[offset]
                finished = time.perf_counter()
                if finished < window.start and response.status_code == 200:
                    result.warm_up_latencies_s.append(finished - started)
                if not window.counts(finished):
                    continue
                if response.status_code != 200:
                    failed(str(response.status_code))
                    continue
                result.latencies_s.append(finished - started)
                stages = response.json().get("stages", {})
                result.cache_hits += str(stages.get("cache", {}).get("status", "")).startswith("hit")
                ran = {
                    stage: float(info["ms"])
                    for stage, info in stages.items()
                    if info["status"] not in ("skipped", "cached")  # a stage that did not run took no time
                }
                for stage, ms in ran.items():
                    result.stage_ms.setdefault(stage, []).append(ms)
                result.answers.append((finished - started, ran))

    await asyncio.gather(open_window(), *(worker(i) for i in range(clients)))
    result.warm_up_s, result.settled = window.start - window.began, window.settled
    return result


def warm_up_p95(result: LoadResult) -> float:
    return float(np.percentile(result.warm_up_latencies_s, 95)) if result.warm_up_latencies_s else float("nan")


def wait_http(url: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    wait_for_http(url, READY_TIMEOUT_S, alive=lambda: proc is None or proc.poll() is None)


def start_app(cfg: RagcConfig, name: str) -> str:
    """This Serve app on local Ray and a free loopback port; returns its query URL."""
    from ray import serve

    from serve.app import build_app

    ensure_ray(cfg)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(cfg), name=name, route_prefix="/", blocking=False)
    wait_http(f"http://127.0.0.1:{port}/readyz")
    return f"http://127.0.0.1:{port}/v1/query"


def running_replicas(app: str) -> dict[str, int]:
    from ray import serve
    from ray.serve.schema import ReplicaState

    deployments = serve.status().applications[app].deployments
    return {name: d.replica_states.get(ReplicaState.RUNNING, 0) for name, d in deployments.items()}


class ReplicaTimeline(BackgroundSampler):
    """Running replicas per stage of a Serve app, sampled from its start: each change with its second.
    A tail that the autoscaler causes shows as a replica that arrived during the measured window."""

    def __init__(self, app: str, interval_s: float = 2.0) -> None:
        super().__init__(interval_s)
        self.changes: list[tuple[float, dict[str, int]]] = []
        self._app, self._started = app, time.perf_counter()
        self.changed_at = self._started  # perf_counter time of the last change seen

    def sample(self) -> None:
        replicas = running_replicas(self._app)
        if not self.changes or self.changes[-1][1] != replicas:
            self.changed_at = time.perf_counter()
            self.changes.append((round(self.changed_at - self._started, 1), replicas))

    def last_change(self) -> float:
        return self.changed_at


def autoscaler_quiet_s(cfg: RagcConfig) -> float:
    """How long replicas must stay unchanged under a steady load before no scale-out is still coming: Serve
    averages each stage's load over its look-back, then waits its upscale delay (plus one load report)."""
    return max(d.look_back_period_s + d.upscale_delay_s + d.metrics_interval_s for d in cfg.serve.deployments.values())


def bench_config(cfg: RagcConfig) -> RagcConfig:
    cfg = cfg.model_copy(deep=True)
    cfg.milvus.collection = "ragc_bench_query"
    cfg.serve.auth.enabled = False
    cfg.serve.auth.single_tenant = BENCH_TENANT
    cfg.serve.http_host = "127.0.0.1"
    cfg.serve.retrieve.similarity_floor = -1.0  # the reference has no floor: rerank the same candidate count
    cfg.serve.cache.enabled = False  # the reference has no cache; `ragc bench cache` measures it
    cfg.serve.llm.enabled = False  # nor an LLM (extractive answers on both sides); `ragc bench llm` measures it
    # throughput, not SLOs: the reference has no stage timeouts either, so ours must not shed load
    cfg.serve.request_timeout_s = 300.0
    for stage_cfg in (cfg.serve.retrieve, cfg.serve.rerank, cfg.serve.synthesize, cfg.serve.rewrite):
        stage_cfg.timeout_s = 240.0
    if cfg.serve.rerank.model is None:
        cfg.serve.rerank.model = cfg.embedding.model  # same weights for both sides: a cost model, not quality
    return cfg


def bench_query(cfg: RagcConfig, dataset: Path, limit: int, clients: int, duration_s: float) -> int:
    from ray import serve

    cfg = bench_config(cfg)
    questions = load_questions(dataset, 200)
    with tempfile.TemporaryDirectory() as tmp:
        # one named source whatever the temporary folder: a re-run syncs the same documents (nothing new to
        # embed), and a changed --limit replaces them rather than adding a second copy
        subset = write_subset(dataset, limit, Path(tmp))
        ingest = run_sync(cfg, subset, BENCH_TENANT, prune=True, source_name=BENCH_SOURCE)
        config_file = Path(tmp) / "bench.yaml"
        config_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")), encoding="utf-8")

        port = free_port()
        reference = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.reference_app",
                "--config",
                str(config_file),
                "--tenant",
                BENCH_TENANT,
                "--port",
                str(port),
            ],
        )
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", reference)
            url = f"http://127.0.0.1:{port}/v1/query"
            ref = asyncio.run(closed_loop(url, questions, clients, duration_s, "llama-index reference", WARM_UP_S))
        finally:
            reference.terminate()
            reference.wait(30)

    url = start_app(cfg, "bench")
    asyncio.run(closed_loop(url, questions, 2, 5, "first requests"))
    time.sleep(2)
    idle_mb = total_rss() / MB
    # every stage autoscales as configured; the measured window opens once the replicas have settled under
    # the full load (the reference, one process, has nothing to settle)
    with PeakMemory() as peak, ReplicaTimeline("bench") as timeline:
        ours = asyncio.run(
            closed_loop(
                url,
                questions,
                clients,
                duration_s,
                "ragc Serve app",
                WARM_UP_S,
                replicas_changed_at=timeline.last_change,
                replicas_quiet_s=autoscaler_quiet_s(cfg),
            )
        )
    replicas = running_replicas("bench")
    serve.delete("bench")

    stage_p50 = {s: float(np.percentile(v, 50)) for s, v in ours.stage_ms.items()}
    stage_p95 = {s: float(np.percentile(v, 95)) for s, v in ours.stage_ms.items()}  # which stage owns the tail
    overhead = ours.pct(50) * 1000 / sum(stage_p50.values())
    report = {
        "bench": "query",
        "clients": clients,
        "duration_s": duration_s,
        "chunks": ingest.chunks_total,
        "ours": ours.summary(),
        "reference": ref.summary(),
        "ratio_qps": round(ours.qps / ref.qps, 3),
        "ratio_p50": round(ours.pct(50) / ref.pct(50), 3),
        "ratio_p95": round(ours.pct(95) / ref.pct(95), 3),
        "stage_p50_ms": {k: round(v, 1) for k, v in stage_p50.items()},
        "stage_p95_ms": {k: round(v, 1) for k, v in stage_p95.items()},
        "time_split_all_ms": ours.time_split(),
        "time_split_slowest_5pct_ms": ours.time_split(95),
        "overhead_e2e_p50_over_stage_sum": round(overhead, 3),
        "cluster_rss_idle_mb": round(idle_mb),
        "cluster_rss_peak_under_load_mb": round(peak.peak_bytes / MB),
        "replicas": replicas,
        "replicas_timeline_s": timeline.changes,  # from the start of the warm-up
        "warm_up_s": {"reference": round(ref.warm_up_s, 1), "ours": round(ours.warm_up_s, 1)},
        "warm_up_p95_ms": {r.name: round(warm_up_p95(r) * 1000, 1) for r in (ref, ours)},
        "ours_settled": ours.settled,
    }
    for r in (ref, ours):
        print(
            f"{r.name:>24}: {r.qps:6.2f} QPS (clients / mean latency {r.closed_loop_qps:.2f})  "
            f"p50 {r.pct(50) * 1000:7.1f} ms  p95 {r.pct(95) * 1000:7.1f} ms  "
            f"failures {r.failures} {r.failure_codes or ''}"
        )
    print(
        f"QPS ratio ours/reference {report['ratio_qps']} (target >= 2.0); p50 ratio {report['ratio_p50']}; "
        f"p95 ratio {report['ratio_p95']} (target <= 1.0)"
    )
    print(
        f"overhead: e2e p50 / sum of stage p50 = {overhead:.3f} (target <= 1.15); stage p50s {report['stage_p50_ms']}"
    )
    print(f"stage p95s {report['stage_p95_ms']}")
    print(f"mean ms per stage, all answers: {report['time_split_all_ms']}")
    print(f"mean ms per stage, slowest 5%:  {report['time_split_slowest_5pct_ms']}")
    settled = "settled" if ours.settled else f"NOT settled after {MAX_WARM_UP_S:.0f} s"
    print(
        f"replicas after the load (autoscaled): {replicas}; over time (s from the warm-up's start, measured "
        f"from {ours.warm_up_s:.1f} s, {settled}; the reference from {ref.warm_up_s:.0f} s): {timeline.changes}"
    )
    print(
        f"answers during the warm-up (ours: while the replicas scaled out): p95 reference "
        f"{warm_up_p95(ref) * 1000:.1f} ms, ours {warm_up_p95(ours) * 1000:.1f} ms"
    )
    print(f"local cluster RSS: idle {idle_mb:.0f} MB, peak under load {peak.peak_bytes / MB:.0f} MB")
    print(json.dumps(report))
    return 0  # the bench collection is kept: a re-run ingests nothing (incremental sync)
