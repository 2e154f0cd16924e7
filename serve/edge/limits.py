"""Per-tenant admission: a request rate with a burst (token bucket) and requests in flight (leases).

The state lives in Redis, so a limit holds across ingress replicas; each decision is one Lua script (atomic,
with Redis's own clock, so replicas' clocks do not matter). With Redis down or slower than its timeout a
replica limits on its own in-process state (per replica, so N replicas admit up to N times the limit),
counts that in `ragc_limiter_fallbacks`, and tries Redis again a few seconds later: a limiter never turns
into an error. Written here rather than taken from the `limits` package, which has no token bucket with a
burst and no concurrency leases."""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cluster.config import LimitsConfig, TenantLimits
from serve import metrics
from serve.errors import RateLimitedError

logger = logging.getLogger(__name__)
KEY_PREFIX = "ragc:limit:"
REDIS_RETRY_S = 5.0  # after a Redis failure, the replica limits locally this long before trying Redis again

# KEYS[1] bucket; ARGV rate, size. Returns {admitted, seconds until a token} (a string: Lua numbers are
# truncated to integers on the way out).
TOKEN_BUCKET_LUA = """
local rate, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or size
local at = tonumber(state[2]) or now
tokens = math.min(size, tokens + math.max(0, now - at) * rate)
local admitted, wait = 0, 0
if tokens >= 1 then tokens = tokens - 1; admitted = 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(size / rate * 1000) + 1000)
return {admitted, tostring(wait)}
"""

# KEYS[1] lease set (member = lease id, score = expiry in ms); ARGV limit, lease id, lease ttl in ms.
# A lease whose release was lost (a replica died mid-request) expires after the request deadline.
LEASE_LUA = """
local limit, ttl = tonumber(ARGV[1]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= limit then return 0 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[1], ttl + 1000)
return 1
"""


class LimitStore(Protocol):
    """Where the counts live: Redis (shared by replicas) or this process."""

    async def take(self, tenant: str, rate: float, size: float) -> float:
        """0 when a token was taken, else the seconds until one is available."""
        ...

    async def lease(self, tenant: str, limit: int, lease_id: str, ttl_s: float) -> bool: ...

    async def release(self, tenant: str, lease_id: str) -> None: ...


@dataclass
class LocalLimitStore:
    """The same two algorithms in this process (the fallback, and what unit tests drive)."""

    clock: Callable[[], float] = time.monotonic
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # tenant -> (tokens, at)
    leases: dict[str, dict[str, float]] = field(default_factory=dict)  # tenant -> {lease id: expiry}

    async def take(self, tenant: str, rate: float, size: float) -> float:
        now = self.clock()
        tokens, at = self.buckets.get(tenant, (size, now))
        tokens = min(size, tokens + max(0.0, now - at) * rate)
        if tokens >= 1:
            self.buckets[tenant] = (tokens - 1, now)
            return 0.0
        self.buckets[tenant] = (tokens, now)
        return (1 - tokens) / rate

    async def lease(self, tenant: str, limit: int, lease_id: str, ttl_s: float) -> bool:
        now = self.clock()
        held = {k: exp for k, exp in self.leases.get(tenant, {}).items() if exp > now}
        self.leases[tenant] = held
        if len(held) >= limit:
            return False
        held[lease_id] = now + ttl_s
        return True

    async def release(self, tenant: str, lease_id: str) -> None:
        self.leases.get(tenant, {}).pop(lease_id, None)


class RedisLimitStore:
    def __init__(self, url: str, password: str | None, timeout_s: float) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis

        pool = BlockingConnectionPool.from_url(
            url,
            password=password,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            timeout=timeout_s,
            max_connections=32,
        )
        self._redis = Redis(connection_pool=pool)
        self._bucket = self._redis.register_script(TOKEN_BUCKET_LUA)
        self._lease = self._redis.register_script(LEASE_LUA)

    async def take(self, tenant: str, rate: float, size: float) -> float:
        admitted, wait = await self._bucket(keys=[f"{KEY_PREFIX}rate:{tenant}"], args=[rate, size])
        return 0.0 if int(admitted) else float(wait)

    async def lease(self, tenant: str, limit: int, lease_id: str, ttl_s: float) -> bool:
        key = f"{KEY_PREFIX}inflight:{tenant}"
        return bool(await self._lease(keys=[key], args=[limit, lease_id, math.ceil(ttl_s * 1000)]))

    async def release(self, tenant: str, lease_id: str) -> None:
        await self._redis.zrem(f"{KEY_PREFIX}inflight:{tenant}", lease_id)


@dataclass
class Lease:
    """A request's place among its tenant's requests in flight; `release` when the response is done."""

    tenant: str
    lease_id: str | None = None
    store: LimitStore | None = None

    async def release(self) -> None:
        if self.store is None or self.lease_id is None:
            return
        store, self.store = self.store, None
        try:
            await store.release(self.tenant, self.lease_id)
        except Exception as exc:  # noqa: BLE001 - an unreleased lease expires with the request deadline
            logger.warning("releasing a lease of tenant %s failed: %r", self.tenant, exc)


class TenantLimiter:
    """Admits a tenant's request or raises `RateLimitedError` (429 with the seconds to wait)."""

    def __init__(
        self,
        cfg: LimitsConfig,
        lease_ttl_s: float,
        shared: LimitStore | None,
        local: LocalLimitStore | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cfg = cfg
        self._lease_ttl_s = lease_ttl_s
        self._shared = shared
        self._local = local or LocalLimitStore(clock=clock)
        self._clock = clock
        self._shared_down_until = 0.0

    def limits_for(self, tenant: str) -> TenantLimits:
        override = self._cfg.tenants.get(tenant)
        return override.over(self._cfg.default) if override else self._cfg.default

    @property
    def active(self) -> bool:
        """Whether any tenant has a limit (else admission costs nothing)."""
        return any(t.rate() or t.concurrent for t in (self._cfg.default, *self._cfg.tenants.values()))

    async def admit(self, tenant: str) -> Lease:
        """The request's lease (hold it until the response is done); a refused request spends nothing."""
        limits = self.limits_for(tenant)
        lease = Lease(tenant)
        if limits.concurrent:
            lease_id = uuid.uuid4().hex
            leased, store = await self._call("lease", tenant, limits.concurrent, lease_id, self._lease_ttl_s)
            if not leased:
                metrics.count_limited("concurrent")
                raise RateLimitedError(
                    f"tenant {tenant!r} already has {limits.concurrent} requests in flight", retry_after_s=1.0
                )
            lease = Lease(tenant, lease_id, store)
        rate = limits.rate()
        if rate is not None:
            wait, _ = await self._call("take", tenant, *rate)
            if wait > 0:
                await lease.release()
                metrics.count_limited("rate")
                raise RateLimitedError(
                    f"tenant {tenant!r} is over its rate of {rate[0]:g} requests/s (burst {rate[1]:g}); "
                    f"retry in {wait:.1f} s",
                    retry_after_s=wait,
                )
        return lease

    async def _call(self, method: str, *args: Any) -> tuple[Any, LimitStore]:
        """The shared store's answer, or this replica's when Redis fails (counted, logged once per outage);
        with the store that answered, which a lease is released to."""
        if self._shared is not None and self._clock() >= self._shared_down_until:
            try:
                return await getattr(self._shared, method)(*args), self._shared
            except Exception as exc:  # noqa: BLE001 - fail open to the replica's own limits, never to an error
                logger.warning("limiter store unavailable (%r): this replica limits alone for %gs", exc, REDIS_RETRY_S)
                metrics.count_limiter_fallback()
                self._shared_down_until = self._clock() + REDIS_RETRY_S
        return await getattr(self._local, method)(*args), self._local
