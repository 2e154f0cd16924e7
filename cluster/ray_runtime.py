"""Ray bootstrap: join the configured cluster, or start an ephemeral local one for this process."""

from __future__ import annotations

import logging
import os

from cluster.config import RagcConfig

MB = 1024 * 1024


def ensure_ray(cfg: RagcConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return
    ray.init(
        address="local",
        num_cpus=cfg.ray.num_cpus or os.cpu_count(),
        include_dashboard=False,
        object_store_memory=cfg.ray.object_store_memory_mb * MB,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = True
