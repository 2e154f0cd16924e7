"""The Ray Data part of a sync: parse+chunk in tasks, embed (on an actor pool, or a warm worker for a job of one
batch on a CPU), upsert through a sink."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from cluster.config import ChunkingConfig, RagcConfig
from cluster.ray_runtime import ensure_ray
from cluster.store.schema import ChunkFields
from ingest_jobs.chunking import Chunker, model_tokenizer
from ingest_jobs.documents import Failure, SourceDocument
from ingest_jobs.embed_stage import ChunkEmbedder, EmbedPool, embed_on_warm_worker, embed_pool
from ingest_jobs.enrich_stage import DOC_HEAD_COLUMN, ENRICHED, ENRICHMENT_COLUMN, ChunkEnricher
from ingest_jobs.loaders import ParseError, parse
from ingest_jobs.sink import MilvusChunkSink, SinkStats

ERROR_COLUMN = "error"
RESTRICTED_IN_AN_OLD_INDEX = (
    "declares access groups, and this index was built before they were stored: `ragc reindex` first"
)
EMPTY_ROW: dict[str, Any] = {
    "id": "",
    "doc_id": "",
    "tenant_id": "",
    "text": "",
    "source": "",
    "title": "",
    "doc_type": "",
    "section": "",
    "year": 0,
    "updated_at": 0,
    "chunk_index": 0,
    "content_hash": "",
    "author": "",
    "tags": "",
    "access": "",
    "focus": "",
    ENRICHMENT_COLUMN: "",
    ENRICHED: False,
    DOC_HEAD_COLUMN: "",
    ERROR_COLUMN: "",
}


@dataclass
class PipelineOutcome:
    chunk_ids: dict[str, list[str]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    stats: SinkStats = field(default_factory=SinkStats)


def parse_and_chunk(
    row: dict[str, Any],
    chunking: ChunkingConfig,
    model: str,
    tenant: str,
    head_chars: int = 0,
    max_text_bytes: int = 0,
    access_stored: bool = True,
) -> list[dict[str, Any]]:
    """`head_chars`: the start of the document each row carries for a summary (0: none); `max_text_bytes`: the
    store's limit on a chunk's text; `access_stored`: the collection has a field for documents' access groups."""
    doc = SourceDocument.from_json(row["doc"])
    try:
        parsed = parse(doc)
        chunks = Chunker(chunking, model_tokenizer(model), max_text_bytes).chunk(doc, tenant, parsed)
    except ParseError as exc:
        return [EMPTY_ROW | {"doc_id": doc.doc_id, ERROR_COLUMN: str(exc)}]
    if parsed.access and not access_stored:  # stored without its groups, every key of the tenant would read it
        return [EMPTY_ROW | {"doc_id": doc.doc_id, ERROR_COLUMN: RESTRICTED_IN_AN_OLD_INDEX}]
    if not chunks:
        return [EMPTY_ROW | {"doc_id": doc.doc_id, ERROR_COLUMN: "no text content"}]
    head = {DOC_HEAD_COLUMN: parsed.text[:head_chars]}
    return [EMPTY_ROW | vars(chunk) | head for chunk in chunks]


def enriched(chunked: Any, cfg: RagcConfig) -> Any:
    """The chunks with what enrichment wrote for them (`ingest.enrichment`), or as they are."""
    import ray.data

    enrichment = cfg.ingest.enrichment
    if not enrichment.enabled:
        return chunked
    return chunked.map_batches(
        ChunkEnricher,
        fn_constructor_kwargs={"config": cfg.model_dump(mode="json")},
        compute=ray.data.ActorPoolStrategy(size=enrichment.actors, max_tasks_in_flight_per_actor=1),
        batch_size=enrichment.batch_rows,
        batch_format="numpy",
        num_cpus=enrichment.cpus_per_actor,
        num_gpus=enrichment.gpus_per_actor or None,
    )


def embed_and_write(
    cfg: RagcConfig,
    collection: str,
    tenant: str,
    docs: list[SourceDocument],
    reuse_from: tuple[str, ...] = (),
    declared: tuple[str, ...] = ChunkFields.DECLARED,
) -> PipelineOutcome:
    """`declared`: the declared document fields the collection has (`schema.stored_fields`)."""
    import ray.data

    ensure_ray(cfg)
    cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    blocks = max(1, min(len(docs), cfg.ingest.parse_blocks or 2 * cpus))
    items = [{"doc": doc.to_json()} for doc in docs]
    chunked = (
        ray.data.from_items(items, override_num_blocks=blocks)
        .flat_map(
            partial(
                parse_and_chunk,
                chunking=cfg.chunking,
                model=cfg.embedding.model,
                tenant=tenant,
                head_chars=cfg.ingest.enrichment.document_max_chars if cfg.ingest.enrichment.summary else 0,
                max_text_bytes=cfg.milvus.text_max_chars,
                access_stored=ChunkFields.ACCESS in declared,
            )
        )
        .materialize()
    )
    outcome = PipelineOutcome()
    for row in chunked.select_columns(["doc_id", "id", ERROR_COLUMN]).iter_rows():
        if row[ERROR_COLUMN]:
            outcome.failures.append(Failure(row["doc_id"], row[ERROR_COLUMN]))
        else:
            outcome.chunk_ids.setdefault(row["doc_id"], []).append(row["id"])
    if not outcome.chunk_ids:
        return outcome
    rows = sum(len(ids) for ids in outcome.chunk_ids.values())
    pool = embed_pool(
        cfg.ingest,
        [int(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node["Alive"]],
        float(ray.cluster_resources().get("GPU", 0)),
        rows,
    )
    actor_cfg = cfg
    if pool.torch_threads and not cfg.embedding.num_threads:
        actor_cfg = cfg.model_copy(
            update={"embedding": cfg.embedding.model_copy(update={"num_threads": pool.torch_threads})}
        )
    sink = MilvusChunkSink(cfg.model_dump(mode="json"), collection, declared)
    embed = embedded_on_warm_worker if one_cpu_batch(pool, rows, cfg) else embedded_on_actor_pool
    embedded = embed(enriched(chunked, cfg), actor_cfg, pool, collection, reuse_from)
    embedded.write_datasink(sink, ray_remote_args={"num_cpus": 0})  # I/O-bound: never wait on the embedders' CPUs
    outcome.stats = sink.stats
    return outcome


def one_cpu_batch(pool: EmbedPool, rows: int, cfg: RagcConfig) -> bool:
    """Whether the job embeds in one batch on a CPU, where a task on a warm worker beats starting an actor."""
    return pool.num_gpus is None and rows <= cfg.ingest.embed_batch_rows


def embedded_on_actor_pool(
    chunks: Any, cfg: RagcConfig, pool: EmbedPool, collection: str, reuse_from: tuple[str, ...]
) -> Any:
    import ray.data

    return chunks.map_batches(
        ChunkEmbedder,
        fn_constructor_kwargs={
            "config": cfg.model_dump(mode="json"),
            "collection": collection,
            "reuse_from": reuse_from,
        },
        # one batch in flight per actor: with the default 4 the first actor ready took every batch of a
        # small job while the others loaded their models
        compute=ray.data.ActorPoolStrategy(
            min_size=pool.min_size, max_size=pool.max_size, max_tasks_in_flight_per_actor=1
        ),
        batch_size=cfg.ingest.embed_batch_rows,
        batch_format="numpy",
        num_gpus=pool.num_gpus,
        num_cpus=pool.num_cpus,
        scheduling_strategy="SPREAD",  # best effort: one model per node before a second on any
    )


def embedded_on_warm_worker(
    chunks: Any, cfg: RagcConfig, pool: EmbedPool, collection: str, reuse_from: tuple[str, ...]
) -> Any:
    import ray.data

    return chunks.map_batches(
        embed_on_warm_worker,
        fn_kwargs={"config": cfg.model_dump(mode="json"), "collection": collection, "reuse_from": reuse_from},
        compute=ray.data.TaskPoolStrategy(size=1),
        batch_size=cfg.ingest.embed_batch_rows,
        batch_format="numpy",
        num_cpus=pool.num_cpus,
    )
