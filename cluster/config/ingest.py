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


PROMPT_VERSION = "q1"  # ingest_jobs/enrich_stage.py's prompt; a new prompt is a new version


class EnrichmentConfig(Section):
    """Enrichment at ingest: an LLM writes the questions each chunk answers (doc2query) and/or a short summary
    of each document, and they join the chunk's BM25 document (never its text, which citations and answers
    read). Written once and kept by chunk id (a summary by document content): an unchanged chunk is never
    enriched again, not even by a reindex."""

    questions: int = Field(default=0, ge=0, le=10, description="questions generated per chunk; 0 = none")
    summary: bool = Field(default=False, description="a summary of each document, added to each of its chunks")
    summary_max_tokens: int = Field(default=64, gt=0, le=512, description="tokens generated per summary")
    document_max_chars: int = Field(default=2000, gt=0, description="the start of a document that is summarized")
    engine: str = Field(default="default", description="the serve.llm.engines entry whose model writes them")
    max_tokens: int = Field(default=96, gt=0, le=512, description="tokens generated per chunk")
    chunk_max_chars: int = Field(default=1500, gt=0, description="a longer chunk is cut to this before the prompt")
    batch_rows: int = Field(default=64, gt=0, description="chunks per enrichment-actor call (one engine batch)")
    actors: int = Field(default=1, ge=1, description="enrichment actors, one engine each")
    cpus_per_actor: float = Field(default=1.0, ge=0, description="CPUs an enrichment actor reserves")
    gpus_per_actor: float = Field(default=0.0, ge=0, description="GPUs an enrichment actor reserves; 0 = CPU")

    @property
    def enabled(self) -> bool:
        return bool(self.questions or self.summary)

    def fingerprint(self, model: str) -> str:
        """Recorded in the collection's BM25 scheme; "" when off (collections from before it stay valid)."""
        if not self.enabled:
            return ""
        parts = ([f"questions={self.questions}"] if self.questions else []) + (["summary"] if self.summary else [])
        return f"{'+'.join(parts)}:{model}:{PROMPT_VERSION}"


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
    enrichment: EnrichmentConfig = Field(default_factory=EnrichmentConfig)
    faults: IngestFaults = Field(default_factory=IngestFaults)
