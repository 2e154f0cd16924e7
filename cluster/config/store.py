"""Where the data lives: Milvus (chunks, ledgers, catalog) and Redis (the shared cache levels)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from cluster.config.base import DEFAULT_COLLECTION_ALIAS, SecretRef, Section


class MilvusConfig(Section):
    uri: str | None = Field(
        default=None, description="Milvus URI; unset means the local milvus-lite sidecar of `ragc up`"
    )
    token: SecretRef = Field(default_factory=SecretRef, description="Milvus token (user:password or API key)")
    db_name: str = Field(default="default", description="Milvus database")
    collection: str = Field(
        default=DEFAULT_COLLECTION_ALIAS,
        description="alias that serving reads through; physical collections are `<alias>_v<N>`",
    )
    meta_collection: str = Field(default="ragc_meta", description="key-value records: index version, sources")
    text_max_chars: int = Field(default=16384, ge=256, le=65535, description="VARCHAR length of chunk text")
    hnsw_m: int = Field(default=16, ge=4, le=64)
    hnsw_ef_construction: int = Field(default=200, ge=8, le=1024)
    bm25_analyzer: dict[str, Any] = Field(
        default_factory=lambda: {"tokenizer": "standard", "filter": ["lowercase"]},
        description="Milvus analyzer params for the BM25 text field (lite supports standard/jieba)",
    )
    bm25_stemmer: str | None = Field(
        default="english",
        description="Snowball stemmer applied to the BM25 copy of each chunk and to queries (Milvus Lite "
        "cannot stem); null indexes plain lower-cased words. Changing it needs `ragc reindex`",
    )
    connect_timeout_s: float = Field(default=10.0, gt=0)
    connect_attempts: int = Field(
        default=4,
        ge=1,
        description="batch jobs (ingest, reindex, eval, training) try a connection that failed (the server down, "
        "or too busy to answer within connect_timeout_s) this many times in all, 1, 2, 4 s apart; the service "
        "tries once and reports itself unready instead",
    )
    keepalive_without_calls: bool = Field(
        default=False,
        description="gRPC pings on idle connections; milvus-lite's server answers them with GOAWAY "
        "(too_many_pings), so only turn this on against a real Milvus that permits them",
    )
    keep_old_collections: int = Field(
        default=1,
        ge=0,
        description="older generations kept (released, on disk) after a reindex swaps the alias: what "
        "`ragc reindex --rollback` can go back to",
    )

    @field_validator("bm25_stemmer")
    @classmethod
    def _known_stemmer(cls, v: str | None) -> str | None:
        from cluster.store.bm25_text import check_stemmer

        return check_stemmer(v) if v else None


class RedisConfig(Section):
    url: str | None = Field(
        default=None, description="Redis URL; unset means the local redis-server sidecar when one is installed"
    )
    password: SecretRef = Field(default_factory=SecretRef)
    enabled: bool = Field(default=True, description="false turns the shared cache layer off")
    socket_timeout_s: float = Field(default=0.25, gt=0, description="a slower Redis is bypassed, not awaited")
    embedding_cache_ttl_s: int = Field(default=30 * 24 * 3600, ge=0, description="0 keeps entries forever")
