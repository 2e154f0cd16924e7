"""The local Redis sidecar (`ragc up`) as ratings need it: a full cache evicts cache entries, never the feedback
streams, and the streams outlive `ragc down` and the next `ragc up`. A real redis-server."""

from __future__ import annotations

from pathlib import Path

from local.sidecars import start_redis, stop
from tests.integration.conftest import free_port


def test_a_full_cache_never_evicts_the_ratings_and_they_survive_a_restart(tmp_path: Path) -> None:
    import redis

    port, data = free_port(), tmp_path / "redis-data"
    record = start_redis("127.0.0.1", port, tmp_path / "logs", timeout_s=30, data_dir=data)
    assert record is not None
    try:
        client = redis.Redis(port=port)
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "volatile-lru"}
        client.xadd("ragc:feedback:acme", {"entry": "a rating"})
        client.config_set("maxmemory", "4mb")
        for n in range(400):  # 8 MB of cache entries, each with its TTL as the response cache writes them
            client.set(f"ragc:resp:{n}", b"x" * 20_000, ex=3600)
        assert client.dbsize() < 401, "the cache was cut back to fit"
        assert [f[b"entry"] for _, f in client.xrange("ragc:feedback:acme")] == [b"a rating"]
    finally:
        assert stop(record)  # SIGTERM, as `ragc down` stops it: Redis saves before it exits
    again = start_redis("127.0.0.1", port, tmp_path / "logs", timeout_s=30, data_dir=data)
    assert again is not None
    try:
        entries = redis.Redis(port=port).xrange("ragc:feedback:acme")
        assert [f[b"entry"] for _, f in entries] == [b"a rating"]
    finally:
        stop(again)
