"""Per-tenant limits held in a real Redis by two limiters (two ingress replicas), and the fail-open path with
no Redis behind the URL. The 429s over HTTP on the Serve app: test_query_service.py."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis

from cluster.config import LimitsConfig
from serve.edge.limits import KEY_PREFIX, Lease, RedisLimitStore, TenantLimiter
from serve.errors import RateLimitedError
from tests.integration.conftest import free_port


def replica(url: str, limits: dict[str, Any]) -> TenantLimiter:
    store = RedisLimitStore(url, None, timeout_s=0.5)
    return TenantLimiter(LimitsConfig.model_validate(limits), 30.0, shared=store)


def test_two_replicas_share_one_rate_and_one_count_in_flight(redis_server: dict[str, Any]) -> None:
    url, tenant = redis_server["url"], f"t-{uuid.uuid4().hex[:8]}"
    limits = {"default": {"requests_per_s": 0.1, "burst": 3, "concurrent": 2}}
    a, b = replica(url, limits), replica(url, limits)

    async def scenario() -> None:
        held: list[Lease] = [await a.admit(tenant), await b.admit(tenant)]
        with pytest.raises(RateLimitedError, match="2 requests in flight"):
            await a.admit(tenant)  # b's lease counts on a: the count is in Redis, not in the replica
        await held.pop().release()
        held.append(await a.admit(tenant))  # the third token of the burst (the refusal above spent none)
        for lease in held:
            await lease.release()
        for limiter in (a, b):
            with pytest.raises(RateLimitedError, match=r"rate of 0\.1 requests/s") as refused:
                await limiter.admit(tenant)
            assert 5.0 < refused.value.retry_after_s <= 10.0  # the next token, by Redis's clock

    asyncio.run(scenario())
    client = redis.Redis.from_url(url)
    assert client.zcard(f"{KEY_PREFIX}inflight:{tenant}") == 0
    assert 0 < client.pttl(f"{KEY_PREFIX}rate:{tenant}") <= 31_000  # state expires once the bucket is full again


def test_without_redis_each_replica_limits_alone_and_never_errs() -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    limited = replica(dead, {"default": {"requests_per_s": 1, "burst": 2, "concurrent": 5}})

    async def scenario() -> None:
        first, second = await limited.admit("t"), await limited.admit("t")
        with pytest.raises(RateLimitedError):
            await limited.admit("t")
        await first.release()
        await second.release()

    asyncio.run(scenario())
