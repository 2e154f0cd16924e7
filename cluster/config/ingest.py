"""The ingestion job (`ragc ingest`, `ragc reindex`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cluster.config.base import Section


class IngestFaults(Section):
    """Test-only fault hooks; all off by default."""

    fail_after_batches: int | None = Field(
        default=None, ge=0, description="the Milvus sink raises after this many batches were upserted"
    )
    kill_at: Literal["after_write", "before_prune"] | None = Field(
        default=None,
        description="the ingest process SIGKILLs itself: after the chunks were upserted and before the ledger "
        "records them, or after the ledger and before pruning",
    )


class IngestConfig(Section):
    parse_blocks: int = Field(default=0, ge=0, description="blocks for parse+chunk tasks; 0 = 2 x CPUs")
    embed_batch_rows: int = Field(
        default=512,
        gt=0,
        description="rows per embedding-actor call; the model sorts each call by length, "
        "so larger calls pad less (the model's own batch stays embedding.batch_size)",
    )
    embed_actors_min: int = Field(default=1, ge=1, description="with embed_actors_max set: the pool's smallest size")
    embed_actors_max: int = Field(
        default=0,
        ge=0,
        description="the embedding actor pool's largest size; 0 = one actor per embed_cpus_per_actor CPUs of the "
        "cluster (per GPU with gpus_per_actor), no more than the job has batches, all started at once",
    )
    embed_cpus_per_actor: int = Field(
        default=1,
        ge=1,
        description="CPUs a CPU embedding actor reserves, and its torch threads when embedding.num_threads is 0: "
        "one single-threaded model per core embeds more per CPU-second than one model on every core (README, "
        "Ingestion)",
    )
    gpus_per_actor: float = Field(default=0.0, ge=0, description="0 = CPU; 1 per actor on GPU nodes")
    upsert_batch_size: int = Field(default=256, gt=0, le=10000)
    max_file_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    lease_ttl_s: float = Field(
        default=60.0, gt=1, description="a tenant's ingest lease lapses this long after its holder last renewed it"
    )
    lease_wait_s: float = Field(
        default=0.0,
        ge=0,
        description="how long a second ingest of a busy tenant waits before it exits with who holds it",
    )
    faults: IngestFaults = Field(default_factory=IngestFaults)
