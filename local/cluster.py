"""The embedded local cluster: milvus-lite server + redis-server sidecars and the Ray Serve app host.

`up` is idempotent (what already runs is kept), `down` stops only processes recorded in the state file
and checked by their start time."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cluster.config import RagcConfig
from cluster.local_state import read_state, write_state
from local.http_wait import NotUpError, wait_for_http
from local.nodes import worker_metrics_port
from local.sidecars import SidecarError, process_alive, spawn, start_milvus, start_redis, stop

APP_PROCESS = "app"
DEMO_TENANT = "demo"
DEMO_CORPUS = Path(__file__).parent / "demo_corpus"
SIDECARS = ("milvus", "redis")
APP_READY_TIMEOUT_S = 300.0  # model loads + serve.run on 2 cores take about a minute


def http_url(cfg: RagcConfig) -> str:
    return f"http://{cfg.local.host}:{cfg.local.http_port}"


def up_sidecars(cfg: RagcConfig) -> dict[str, Any]:
    state_dir = cfg.state_dir.resolve()
    state = read_state(state_dir)
    logs = state_dir / "logs"
    if not process_alive(state.get("milvus")):
        state["milvus"] = start_milvus(
            state_dir / "milvus", cfg.local.host, cfg.local.milvus_port, logs, cfg.local.start_timeout_s
        )
    if cfg.redis.enabled and cfg.redis.url is None and not process_alive(state.get("redis")):
        state["redis"] = start_redis(
            cfg.local.host, cfg.local.redis_port, logs, cfg.local.start_timeout_s, state_dir / "redis"
        )
        if state["redis"] is None:
            state["redis_note"] = "redis-server not installed: the shared cache layer (L2/L3) is off"
    write_state(state_dir, state)
    return state


def up_app(cfg: RagcConfig, config_file: Path | None, demo: bool) -> dict[str, Any]:
    """Start the process that owns local Ray and the Serve app; wait until /readyz?full=1 answers 200
    (retrieval ready and the LLM engines up)."""
    state_dir = cfg.state_dir.resolve()
    state = read_state(state_dir)
    if not process_alive(state.get(APP_PROCESS)):
        argv = [sys.executable, "-m", "local.app_host"]
        if config_file:
            argv += ["--config", str(config_file.resolve())]
        if demo:
            argv.append("--demo")
        env = {"RAGC_STATE_DIR": str(state_dir), "RAGC_LOCAL__NODES": str(cfg.local.nodes)}
        record = spawn(APP_PROCESS, argv, state_dir / "logs", env)
        state[APP_PROCESS] = record | {"http": http_url(cfg), "nodes": 1 + cfg.local.nodes}
        write_state(state_dir, state)
    wait_ready(cfg, state[APP_PROCESS])
    return state


def wait_ready(cfg: RagcConfig, record: dict[str, Any]) -> None:
    try:
        wait_for_http(f"{http_url(cfg)}/readyz?full=1", APP_READY_TIMEOUT_S, alive=lambda: process_alive(record))
    except NotUpError as exc:
        raise SidecarError(f"the app did not become ready: {exc}; see {record['log']}") from exc


def down(cfg: RagcConfig) -> list[str]:
    state_dir = cfg.state_dir.resolve()
    state = read_state(state_dir)
    stopped = [name for name in (APP_PROCESS, *SIDECARS) if stop(state.get(name))]
    write_state(state_dir, {})
    return stopped


def status(cfg: RagcConfig) -> dict[str, Any]:
    state_dir = cfg.state_dir.resolve()
    state = read_state(state_dir)
    processes = {
        name: {"running": process_alive(state.get(name)), "pid": (state.get(name) or {}).get("pid")}
        for name in (APP_PROCESS, *SIDECARS)
    }
    milvus = cfg.milvus.uri or (state.get("milvus") or {}).get("uri")
    ray_nodes = (state.get(APP_PROCESS) or {}).get("nodes", 1) if processes[APP_PROCESS]["running"] else 0
    redis = cfg.redis.url or ((state.get("redis") or {}).get("url") if processes["redis"]["running"] else None)
    return {
        "http": http_url(cfg),
        "metrics": f"http://{cfg.local.host}:{cfg.local.metrics_port}/metrics",
        "worker_metrics": [
            f"http://{cfg.local.host}:{worker_metrics_port(cfg.local.metrics_port, i)}/metrics"
            for i in range(ray_nodes - 1)
        ],
        "milvus": milvus,
        "redis": redis if cfg.redis.enabled else None,
        "redis_note": state.get("redis_note") if not redis else None,
        "state_dir": str(state_dir),
        "processes": processes,
        "running": all(p["running"] for n, p in processes.items() if n in ("milvus", APP_PROCESS)),
        "ray_nodes": ray_nodes,
        "answer_budget": cfg.serve.answer_budget(),
    }


@contextmanager
def sidecars_running(cfg: RagcConfig) -> Iterator[bool]:
    """Milvus (and Redis) for a batch command: the configured or running ones, else started here and
    stopped on exit. Yields whether this call started them."""
    if cfg.milvus.uri or status(cfg)["processes"]["milvus"]["running"]:
        yield False
        return
    before = read_state(cfg.state_dir.resolve())
    state = up_sidecars(cfg)
    started = [name for name in SIDECARS if state.get(name) and state.get(name) != before.get(name)]
    try:
        yield True
    finally:
        for name in started:
            stop(state.get(name))
        after = read_state(cfg.state_dir.resolve())
        write_state(cfg.state_dir.resolve(), {k: v for k, v in after.items() if k not in started})
