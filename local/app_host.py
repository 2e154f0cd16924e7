"""The local app host: owns local Ray and the Serve application until SIGTERM (`ragc up` starts it)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from cluster.config import RagcConfig, load_config
from local.nodes import LocalNodes, start_local_nodes

logger = logging.getLogger("ragc.host")


def demo_config(cfg: RagcConfig) -> RagcConfig:
    """Single tenant, auth off, loopback: the explicit local demo mode."""
    cfg = cfg.model_copy(deep=True)
    cfg.serve.auth.enabled = False
    cfg.serve.auth.single_tenant = "demo"
    cfg.serve.http_host = "127.0.0.1"
    return cfg


def start_serve(cfg: RagcConfig) -> LocalNodes | None:
    """Ray (one node, or a head and `local.nodes` workers) and the Serve app; returns the nodes it started."""
    from ray import serve

    from cluster.ray_runtime import ensure_ray
    from serve.app import build_app
    from serve.edge.lost_replica import proxy_env
    from serve.tracing import serve_tracing_config, tracing_env

    # the Ray processes started below inherit these; Serve's proxy reads both from its environment only
    os.environ.update(tracing_env(cfg.serve.traces) | proxy_env())
    # the local cluster's Ray serves every replica's metrics on a known port; job Rays (ingest, eval) pick their own
    ray_cfg = cfg.ray.model_copy(update={"metrics_export_port": cfg.local.metrics_port})
    nodes = None
    if cfg.local.nodes and not cfg.ray.address:
        nodes = start_local_nodes(cfg.local.nodes, cfg.local.cpus_per_node, metrics_export_port=cfg.local.metrics_port)
        ray_cfg = ray_cfg.model_copy(update={"address": nodes.address})
    ensure_ray(cfg.model_copy(update={"ray": ray_cfg}))
    serve.start(
        # one proxy: every local node shares this machine's port
        proxy_location="HeadOnly",
        http_options={
            "host": cfg.serve.http_host,
            "port": cfg.local.http_port,
            "request_timeout_s": cfg.serve.request_timeout_s + 5,
        },
        tracing_config=serve_tracing_config(cfg.serve.traces),
    )
    serve.run(build_app(cfg), name=cfg.serve.app_name, route_prefix=cfg.serve.route_prefix, blocking=False)
    return nodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.app_host")
    parser.add_argument("--config", type=Path)
    parser.add_argument("--demo", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cfg = load_config(args.config)
    if args.demo:
        cfg = demo_config(cfg)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    nodes = start_serve(cfg)
    logger.info("serving on http://%s:%s", cfg.serve.http_host, cfg.local.http_port)
    while not stop.wait(1.0):
        pass
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()
    if nodes:
        nodes.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
