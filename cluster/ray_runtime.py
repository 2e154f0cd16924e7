"""Ray bootstrap: join the configured cluster, or start an ephemeral local one for this process."""

from __future__ import annotations

import logging
import os

from cluster.config import RagcConfig

MB = 1024 * 1024
LOCAL_START_ATTEMPTS = 2


def ensure_ray(cfg: RagcConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(
                address="local",
                num_cpus=cfg.ray.num_cpus or os.cpu_count(),
                include_dashboard=False,
                object_store_memory=cfg.ray.object_store_memory_mb * MB,
                logging_level=logging.WARNING,
                log_to_driver=False,
                _metrics_export_port=cfg.ray.metrics_export_port,
            )
            break
        except Exception as exc:  # Ray raises a bare Exception when its raylet never registers
            if "timed out during startup" not in str(exc) or attempt == LOCAL_START_ATTEMPTS:
                raise
            # seen on a busy 2-core machine: the raylet left no log and never registered; a new session starts
            logging.getLogger(__name__).warning("local Ray did not start (%s); starting a new session", exc)
            ray.shutdown()
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = True
