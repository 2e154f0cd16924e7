"""The embedding step of the ingestion job: vectors reused wherever they already exist (the chunk collection
itself, then the shared cache), the model only for the rest. A job of several batches embeds on an actor pool
(one model load per actor); a job of one batch on a CPU, in a task on a Ray worker that keeps its model
between jobs (`embed_on_warm_worker`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from cluster.config import EmbeddingConfig, IngestConfig, RagcConfig
from cluster.embedding_cache import EmbeddingCache, open_embedding_cache
from cluster.models import Embedder, SentenceTransformerEmbedder, set_torch_threads
from cluster.ray_runtime import node_name
from cluster.store.client import connect
from cluster.store.expr import is_in
from cluster.store.schema import ChunkFields
from cluster.weights import weights_fingerprint

Batch = dict[str, np.ndarray]
EMBEDDED_ON = "embedded_on"  # the Ray node whose actor resolved the row: the job's spread across nodes
FOCUS_COLUMN = "focus"  # ingest_jobs.chunking.Chunk.focus


@dataclass(frozen=True)
class EmbedPool:
    """The embedding actor pool of one job: its size bounds, and what each actor reserves."""

    min_size: int
    max_size: int
    num_cpus: float
    num_gpus: float | None
    torch_threads: int  # 0: the embedding config's own setting


def embed_pool(ingest: IngestConfig, node_cpus: list[int], cluster_gpus: float, rows: int) -> EmbedPool:
    """One CPU actor per `embed_cpus_per_actor` CPUs, each on that many torch threads (two single-threaded
    models on 2 cores embedded 1.24x the chunks of one model on both), or one GPU actor per
    `gpus_per_actor`; never more actors than the job has batches (each would load a model for nothing), and
    then the CPUs left over go to the actors' threads, up to one node's CPUs. An actor reserves only its
    share, never the spare CPUs: replicas on the same cluster may hold them, and a reservation no node can
    meet waits forever. `node_cpus`: each node's CPUs (a head may have none). A configured
    `embed_actors_max` is taken as it is."""
    on_gpu = ingest.gpus_per_actor > 0
    widest = max([*node_cpus, 1])
    cpus = min(ingest.embed_cpus_per_actor, widest)
    threads = cpus
    if ingest.embed_actors_max:
        least, most = min(ingest.embed_actors_min, ingest.embed_actors_max), ingest.embed_actors_max
    else:
        fits = int(cluster_gpus / ingest.gpus_per_actor) if on_gpu else sum(n // cpus for n in node_cpus)
        least = most = max(1, min(fits, math.ceil(rows / ingest.embed_batch_rows)))
        threads = min(widest, cpus * max(1, fits // most))  # fewer batches than CPUs: the spare ones as threads
    if on_gpu:
        return EmbedPool(least, most, num_cpus=0, num_gpus=ingest.gpus_per_actor, torch_threads=0)
    return EmbedPool(least, most, num_cpus=cpus, num_gpus=None, torch_threads=threads)


class VectorResolver:
    """Fills the `embedding` column of a chunk batch and marks which rows needed the model."""

    def __init__(
        self,
        embedder: Embedder,
        stored: StoredVectors | None,
        cache: EmbeddingCache,
        passage_text: Callable[[str, str, str], str] | None = None,
    ) -> None:
        """`passage_text(title, section, text)`: what is embedded per chunk (default: the text)."""
        self._embedder = embedder
        self._stored = stored
        self._cache = cache
        self._passage_text = passage_text

    def __call__(self, batch: Batch) -> Batch:
        ids = [str(i) for i in batch[ChunkFields.ID]]
        # a sentence window's vector is its sentence's (the `focus` column, which is not stored)
        focus = batch.get(FOCUS_COLUMN, [""] * len(ids))
        texts = [str(f) or str(t) for f, t in zip(focus, batch[ChunkFields.TEXT], strict=True)]
        if self._passage_text is not None:
            titles, sections = batch[ChunkFields.TITLE], batch[ChunkFields.SECTION]
            texts = [self._passage_text(str(t), str(s), x) for t, s, x in zip(titles, sections, texts, strict=True)]
        if not ids:
            return batch | {
                ChunkFields.DENSE: np.zeros((0, self._embedder.dim), np.float32),
                "embedded": np.zeros(0, bool),
            }
        known = self._stored.lookup(ids) if self._stored else {}
        vectors: list[list[float] | None] = [known.get(i) for i in ids]
        pending = [n for n, v in enumerate(vectors) if v is None]
        cached = self._cache.get_many(self._embedder.model_id, [texts[n] for n in pending])
        for n, vector in zip(pending, cached, strict=True):
            vectors[n] = vector
        missing = [n for n, v in enumerate(vectors) if v is None]
        if missing:
            fresh = self._embedder.embed([texts[n] for n in missing])
            for n, vector in zip(missing, fresh, strict=True):
                vectors[n] = vector
            self._cache.put_many(self._embedder.model_id, [texts[n] for n in missing], fresh)
        embedded = np.zeros(len(ids), dtype=bool)
        embedded[missing] = True
        batch[ChunkFields.DENSE] = np.asarray(vectors, dtype=np.float32)
        batch["embedded"] = embedded
        return batch


class StoredVectors:
    """Vectors already stored, by chunk id: the collection being written (unchanged chunks of an edited
    document), then older collections with the same embedding model (a reindex that changed only how
    text is indexed re-embeds nothing)."""

    def __init__(self, client: Any, collections: list[str]) -> None:
        self._client = client
        self._collections = collections

    def lookup(self, ids: list[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        for collection in self._collections:
            wanted = [i for i in ids if i not in found]
            if not wanted:
                break
            rows = self._client.query(
                collection, filter=is_in(ChunkFields.ID, wanted), output_fields=[ChunkFields.ID, ChunkFields.DENSE]
            )
            found |= {r[ChunkFields.ID]: list(r[ChunkFields.DENSE]) for r in rows}
        return found


class ChunkEmbedder:
    """Ray Data callable class (`map_batches(ChunkEmbedder, compute=ActorPoolStrategy(...))`)."""

    def __init__(self, config: dict[str, Any], collection: str, reuse_from: tuple[str, ...] = ()) -> None:
        cfg = RagcConfig.model_validate(config)
        self._resolve = chunk_resolver(
            cfg, connect(cfg), collection, reuse_from, SentenceTransformerEmbedder(cfg.embedding)
        )
        self._node = node_name()

    def __call__(self, batch: Batch) -> Batch:
        return embed_parsed(batch, self._resolve, self._node)


def embed_on_warm_worker(batch: Batch, config: dict[str, Any], collection: str, reuse_from: tuple[str, ...]) -> Batch:
    """Ray Data task function (`map_batches(embed_on_warm_worker, fn_kwargs=...)`) for a job of one batch.
    An actor started for one batch loads the model for one call: ~7 CPU-seconds on these cores (importing
    sentence-transformers and torch, most of it) before a few seconds of embedding. A task runs on one of the
    job's pooled Ray workers, which keeps the model it loaded: the sources of a reindex, or the syncs of one
    driver, load it once per worker. On a GPU the pool stays: Ray gives a GPU task a fresh worker each time."""
    cfg = RagcConfig.model_validate(config)
    embedder = warm_embedder(
        cfg.embedding.model_copy(update={"num_threads": 0}).model_dump_json(), weights_fingerprint(cfg.embedding.model)
    )
    set_torch_threads(cfg.embedding.num_threads)  # per batch: the threads are the process's, the model is shared
    client = connect(cfg)
    try:
        return embed_parsed(batch, chunk_resolver(cfg, client, collection, reuse_from, embedder), node_name())
    finally:
        client.close()


@lru_cache(maxsize=1)
def warm_embedder(embedding_json: str, weights: str) -> SentenceTransformerEmbedder:
    """The worker's model, by its configuration and `weights` (their fingerprint: files replaced under the same
    path load again). One at a time: a job of another model replaces it rather than adding to the memory."""
    del weights  # part of the cache key only
    return SentenceTransformerEmbedder(EmbeddingConfig.model_validate_json(embedding_json))


def chunk_resolver(
    cfg: RagcConfig, client: Any, collection: str, reuse_from: tuple[str, ...], embedder: Embedder
) -> VectorResolver:
    stored = StoredVectors(client, [collection, *reuse_from])
    return VectorResolver(embedder, stored, open_embedding_cache(cfg), cfg.embedding.passage_text)


def embed_parsed(batch: Batch, resolve: VectorResolver, node: str) -> Batch:
    # rows of documents that failed to parse carry an error and no text; drop them here rather than
    # in a separate filter operator, which would need a CPU of its own beside the actors
    keep = batch["error"] == ""
    resolved = resolve({column: values[keep] for column, values in batch.items()})
    resolved[EMBEDDED_ON] = np.full(len(resolved[ChunkFields.ID]), node)
    return resolved
