"""Where Redis is: the configured URL, else the local sidecar started by `ragc up`, else nowhere."""

from __future__ import annotations

from cluster.config import RagcConfig
from cluster.local_state import read_state


def redis_url(cfg: RagcConfig) -> str | None:
    if not cfg.redis.enabled:
        return None
    if cfg.redis.url:
        return cfg.redis.url
    sidecar = read_state(cfg.state_dir).get("redis")
    if sidecar:
        return f"redis://{cfg.local.host}:{sidecar['port']}/0"
    return None
