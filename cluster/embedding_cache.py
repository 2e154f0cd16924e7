"""Shared embedding cache: (model id, text hash) -> vector in Redis. An outage is a bypass, never an error."""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np
from cachetools import TTLCache

from cluster.config import RagcConfig
from cluster.hashing import sha
from cluster.models import Embedder
from cluster.redis_conn import redis_url

logger = logging.getLogger(__name__)
KEY_PREFIX = "ragc:emb:"


class EmbeddingCache(Protocol):
    def get_many(self, model_id: str, texts: list[str]) -> list[list[float] | None]: ...

    def put_many(self, model_id: str, texts: list[str], vectors: list[list[float]]) -> None: ...


class NoEmbeddingCache:
    def get_many(self, model_id: str, texts: list[str]) -> list[list[float] | None]:
        return [None] * len(texts)

    def put_many(self, model_id: str, texts: list[str], vectors: list[list[float]]) -> None:
        return None


class RedisEmbeddingCache:
    def __init__(self, url: str, ttl_s: int, timeout_s: float, password: str | None = None) -> None:
        import redis

        self._redis = redis.Redis.from_url(
            url, password=password, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._ttl_s = ttl_s

    @staticmethod
    def key(model_id: str, text: str) -> str:
        return f"{KEY_PREFIX}{model_id}:{sha(text)}"

    def get_many(self, model_id: str, texts: list[str]) -> list[list[float] | None]:
        import redis

        if not texts:
            return []
        try:
            raw = self._redis.mget([self.key(model_id, t) for t in texts])
        except redis.RedisError as exc:
            logger.warning("embedding cache bypassed", extra={"error": str(exc)})
            return [None] * len(texts)
        return [np.frombuffer(v, dtype=np.float32).tolist() if isinstance(v, bytes) else None for v in raw]  # type: ignore[union-attr]

    def put_many(self, model_id: str, texts: list[str], vectors: list[list[float]]) -> None:
        import redis

        try:
            pipe = self._redis.pipeline(transaction=False)
            for text, vector in zip(texts, vectors, strict=True):
                value = np.asarray(vector, dtype=np.float32).tobytes()
                pipe.set(self.key(model_id, text), value, ex=self._ttl_s or None)
            pipe.execute()
        except redis.RedisError as exc:
            logger.warning("embedding cache write skipped", extra={"error": str(exc)})


def open_embedding_cache(cfg: RagcConfig) -> EmbeddingCache:
    url = redis_url(cfg)
    if url is None:
        return NoEmbeddingCache()
    return RedisEmbeddingCache(
        url, cfg.redis.embedding_cache_ttl_s, cfg.redis.socket_timeout_s, cfg.redis.password.resolve()
    )


class CachedEmbedder:
    """An `Embedder` that looks in memory (L1), then the shared cache, and embeds only the rest."""

    def __init__(self, inner: Embedder, shared: EmbeddingCache, memory: TTLCache[str, list[float]] | None) -> None:
        self.model_id = inner.model_id
        self.dim = inner.dim
        self._inner = inner
        self._shared = shared
        self._memory = memory

    def embed(self, texts: list[str]) -> list[list[float]]:
        found: list[list[float] | None] = [self._memory.get(t) if self._memory else None for t in texts]
        pending = [n for n, v in enumerate(found) if v is None]
        for n, vector in zip(pending, self._shared.get_many(self.model_id, [texts[n] for n in pending]), strict=True):
            found[n] = vector
        missing = [n for n, v in enumerate(found) if v is None]
        if missing:
            fresh = self._inner.embed([texts[n] for n in missing])
            self._shared.put_many(self.model_id, [texts[n] for n in missing], fresh)
            for n, vector in zip(missing, fresh, strict=True):
                found[n] = vector
        out = [v for v in found if v is not None]
        if self._memory is not None:
            for text, vector in zip(texts, out, strict=True):
                self._memory[text] = vector
        return out
