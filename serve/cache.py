"""Response cache levels: L1 per replica (LRU + TTL), L2 shared exact (Redis), L3 semantic (Redis).

Every key carries the tenant, the normalised question, filters, conversation tail, pipeline switches
and the index version, so an ingest that changes content makes older entries unreachable. Redis being
down, slow or full is a bypass (short socket timeouts), never an error; writes never block a response."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from cachetools import TTLCache

from cluster.hashing import sha

logger = logging.getLogger(__name__)
CacheStatus = Literal["hit_l1", "hit_l2", "hit_semantic", "miss", "bypass", "off"]
RESPONSE_PREFIX = "ragc:resp:"
SEMANTIC_PREFIX = "ragc:sem:"


def normalise(question: str) -> str:
    return " ".join(question.lower().split())


NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
WORDS = re.compile(r"[a-z]+")
# Words that flip a claim while barely moving its embedding: measured on SciFact, MiniLM puts
# "decreases"/"raises", "less"/"more", "10%"/"90%" pairs above 0.95 cosine.
_POLARITY = (
    "increase increases increased raise raises raised decrease decreases decreased reduce reduces reduced "
    "more less higher lower positive negative prevent prevents prevented induce induces induced promote "
    "promotes promoted inhibit inhibits inhibited not no never without"
)
POLARITY = frozenset(_POLARITY.split(" "))


def same_claim(a: str, b: str) -> bool:
    """Guard for the semantic level: near-identical vectors must also agree on numbers and polarity words."""
    a, b = normalise(a), normalise(b)
    if sorted(NUMBER.findall(a)) != sorted(NUMBER.findall(b)):
        return False
    return POLARITY & set(WORDS.findall(a)) == POLARITY & set(WORDS.findall(b))


@dataclass(frozen=True)
class CacheScope:
    """Everything except the question that decides whether two requests may share an answer."""

    tenant: str
    filters: str
    history_tail: str
    switches: str
    index_version: int
    groups: tuple[str, ...] = ()  # the caller's access groups: what it may read decides the answer too

    def digest(self) -> str:
        scope: list[Any] = [self.tenant, self.filters, self.history_tail, self.switches, self.index_version]
        if self.groups:  # appended only when there are some: the keys of callers without groups stay valid
            scope.append(sorted(self.groups))
        return sha(json.dumps(scope))

    def exact_key(self, question: str) -> str:
        return sha(f"{self.digest()}\x00{normalise(question)}")


class RedisResponseCache:
    """L2 exact and L3 semantic entries in Redis, through a blocking pool with short timeouts."""

    def __init__(self, url: str, password: str | None, timeout_s: float, ttl_s: int, semantic_max: int) -> None:
        from redis.asyncio import BlockingConnectionPool, Redis

        pool = BlockingConnectionPool.from_url(
            url,
            password=password,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            timeout=timeout_s,
            max_connections=64,
        )
        self._redis = Redis(connection_pool=pool)
        self._timeout_s = timeout_s
        self._ttl_s = ttl_s
        self._semantic_max = semantic_max

    async def get_exact(self, key: str) -> dict[str, Any] | None:
        raw = await asyncio.wait_for(self._redis.get(RESPONSE_PREFIX + key), self._timeout_s)
        return json.loads(raw) if raw else None

    async def put_exact(self, key: str, response: dict[str, Any], ttl_s: int | None = None) -> None:
        expiry = ttl_s or self._ttl_s
        await asyncio.wait_for(self._redis.set(RESPONSE_PREFIX + key, json.dumps(response), ex=expiry), self._timeout_s)

    async def nearest(
        self, scope: CacheScope, question: str, vector: list[float], threshold: float
    ) -> dict[str, Any] | None:
        """The cached answer of the closest earlier question in this scope, if within `threshold` cosine
        and making the same claim (`same_claim`)."""
        entries = await asyncio.wait_for(self._redis.lrange(SEMANTIC_PREFIX + scope.digest(), 0, -1), self._timeout_s)
        if not entries:
            return None
        decoded = [json.loads(e) for e in entries]
        matrix = np.asarray([d["v"] for d in decoded], dtype=np.float32)
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        for best in np.argsort(-scores):
            if float(scores[best]) < threshold:
                return None
            if same_claim(question, decoded[best].get("q", "")):
                return await self.get_exact(decoded[best]["k"])
        return None

    async def remember(self, scope: CacheScope, key: str, question: str, vector: list[float]) -> None:
        name = SEMANTIC_PREFIX + scope.digest()
        entry = json.dumps({"k": key, "q": normalise(question), "v": [round(x, 5) for x in vector]})
        pipe: Any = self._redis.pipeline(transaction=False)
        pipe.lpush(name, entry)
        pipe.ltrim(name, 0, self._semantic_max - 1)
        pipe.expire(name, self._ttl_s)
        await asyncio.wait_for(pipe.execute(), self._timeout_s)

    async def close(self) -> None:
        await self._redis.aclose()


class ResponseCache:
    """The levels together: L1, then L2, then L3; `store` fills all three in the background."""

    def __init__(
        self,
        l1: TTLCache[str, dict[str, Any]] | None,
        shared: RedisResponseCache | None,
        semantic: bool,
        threshold: float,
        timeout_s: float,
        degraded_ttl_s: int = 0,
    ) -> None:
        self._l1 = l1
        self._degraded_ttl_s = degraded_ttl_s
        # degraded answers live in L1 beside the full ones, with their own short TTL
        self._l1_degraded: TTLCache[str, dict[str, Any]] | None = (
            TTLCache(l1.maxsize, degraded_ttl_s) if l1 is not None and degraded_ttl_s else None
        )
        self._shared = shared
        self._semantic = semantic
        self._threshold = threshold
        self._timeout_s = timeout_s
        self._background: set[asyncio.Task[None]] = set()

    async def lookup(
        self, scope: CacheScope, question: str, embed: Any
    ) -> tuple[dict[str, Any] | None, CacheStatus, list[float] | None]:
        """(response, status, question vector). `embed` is an async callable, used only for L3."""
        key = scope.exact_key(question)
        for level in (self._l1, self._l1_degraded):
            if level is not None and (hit := level.get(key)) is not None:
                return hit, "hit_l1", None
        if self._shared is None:
            return None, "miss" if self._l1 is not None else "off", None
        vector: list[float] | None = None
        try:
            if (hit := await self._shared.get_exact(key)) is not None:
                if self._l1 is not None:
                    self._l1[key] = hit
                return hit, "hit_l2", None
            if self._semantic:
                embedded: list[float] = await asyncio.wait_for(embed(), self._timeout_s * 4)
                vector = embedded
                if (hit := await self._shared.nearest(scope, question, embedded, self._threshold)) is not None:
                    return hit, "hit_semantic", vector
        except Exception as exc:  # noqa: BLE001 - a cache outage is a bypass, never an error
            logger.warning("response cache bypassed", extra={"error": repr(exc)})
            return None, "bypass", vector
        return None, "miss", vector

    def store(
        self,
        scope: CacheScope,
        question: str,
        vector: list[float] | None,
        response: dict[str, Any],
        degraded: bool = False,
    ) -> None:
        """A full answer for `ttl_s` (and it replaces a degraded one); a degraded one for `degraded_ttl_s`,
        exact levels only (a near-duplicate question should not inherit a fallback)."""
        if degraded and not self._degraded_ttl_s:
            return
        key = scope.exact_key(question)
        if degraded and self._l1_degraded is not None:
            self._l1_degraded[key] = response
        elif not degraded and self._l1 is not None:
            self._l1[key] = response
            if self._l1_degraded is not None:
                self._l1_degraded.pop(key, None)
        if self._shared is None:
            return
        ttl_s = self._degraded_ttl_s if degraded else None
        remembered = None if degraded else vector
        task = asyncio.get_running_loop().create_task(
            self._store_shared(scope, key, question, remembered, response, ttl_s)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _store_shared(
        self,
        scope: CacheScope,
        key: str,
        question: str,
        vector: list[float] | None,
        response: dict[str, Any],
        ttl_s: int | None,
    ) -> None:
        assert self._shared is not None
        try:
            await self._shared.put_exact(key, response, ttl_s)
            if self._semantic and vector is not None:
                await self._shared.remember(scope, key, question, vector)
        except Exception as exc:  # noqa: BLE001 - a failed cache write loses nothing
            logger.warning("response cache write skipped", extra={"error": repr(exc)})


def open_response_cache(cfg: Any, redis_url: str | None, password: str | None) -> ResponseCache | None:
    """From the `serve.cache` and `redis` sections; None when caching is off."""
    ccfg = cfg.serve.cache
    if not ccfg.enabled:
        return None
    l1: TTLCache[str, dict[str, Any]] | None = (
        TTLCache(ccfg.l1_max_entries, ccfg.l1_ttl_s) if ccfg.l1_max_entries else None
    )
    shared = None
    if redis_url:
        shared = RedisResponseCache(redis_url, password, ccfg.lookup_timeout_s, ccfg.ttl_s, ccfg.semantic_max_per_scope)
    return ResponseCache(l1, shared, ccfg.semantic, ccfg.semantic_threshold, ccfg.lookup_timeout_s, ccfg.degraded_ttl_s)
