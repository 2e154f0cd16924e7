"""The embedding actor's vector resolution."""

import numpy as np
import pytest
from pydantic import ValidationError

from cluster.config import EmbeddingConfig, IngestConfig, RagcConfig
from cluster.store.schema import PROP_DENSE_TEXT, CollectionIdentity
from ingest_jobs import embed_stage
from ingest_jobs.embed_stage import EmbedPool, VectorResolver, embed_pool
from ingest_jobs.pipeline import one_cpu_batch
from ingest_jobs.reindex import same_vectors
from tests.fakes import DictEmbeddingCache, DictStoredVectors, HashEmbedder


def test_vector_resolver_embeds_only_what_is_nowhere_else() -> None:
    embedder = HashEmbedder(dim=8)
    cache = DictEmbeddingCache()
    cache.put_many(embedder.model_id, ["cached text"], [[1.0] + [0.0] * 7])
    stored = DictStoredVectors({"id-stored": [0.0, 1.0] + [0.0] * 6})
    resolve = VectorResolver(embedder, stored, cache)
    batch = {"id": np.array(["id-stored", "id-cached", "id-new"]), "text": np.array(["x", "cached text", "new text"])}
    out = resolve(batch)
    assert out["embedding"].shape == (3, 8)
    assert out["embedded"].tolist() == [False, False, True]
    assert embedder.calls == [["new text"]]
    assert cache.get_many(embedder.model_id, ["new text"])[0] is not None


def test_the_dense_arm_embeds_the_configured_passage_text() -> None:
    """`embedding.passage_template`: "{context}: {text}" embeds "title > section: chunk"; the cache is keyed
    by what was embedded, so a bare-text vector is never reused for a contextual one."""
    cfg = EmbeddingConfig(passage_template="{context}: {text}")
    embedder = HashEmbedder(dim=8)
    cache = DictEmbeddingCache()
    cache.put_many(embedder.model_id, ["chunk one"], [[1.0] + [0.0] * 7])
    resolve = VectorResolver(embedder, None, cache, cfg.passage_text)
    batch = {
        "id": np.array(["a", "b"]),
        "text": np.array(["chunk one", "chunk two"]),
        "title": np.array(["Guide", ""]),
        "section": np.array(["Tenants", ""]),
    }
    out = resolve(batch)
    assert embedder.calls == [["Guide > Tenants: chunk one", "chunk two"]]  # no context: the text alone
    assert out["embedded"].tolist() == [True, True] and out["text"].tolist() == ["chunk one", "chunk two"]
    assert EmbeddingConfig(passage_template="{title}: {text}").passage_text("T", "", "x") == "T: x"
    assert EmbeddingConfig().passage_text("T", "S", "x") == "x"
    for bad in ("{title}", "{text} {summary}", "{text} {}"):
        with pytest.raises(ValidationError, match="passage_template"):
            EmbeddingConfig(passage_template=bad)


def test_a_sentence_window_is_embedded_as_its_sentence() -> None:
    """Sentence-window retrieval: the vector is the sentence's (`focus`), the stored text the window; a chunk
    without a focus (ordinary chunking in the same batch shape) embeds its text."""
    embedder = HashEmbedder(dim=8)
    resolve = VectorResolver(embedder, None, DictEmbeddingCache(), EmbeddingConfig().passage_text)
    batch = {
        "id": np.array(["a", "b"]),
        "text": np.array(["One. Two. Three.", "A chunk."]),
        "focus": np.array(["Two.", ""]),
        "title": np.array(["", ""]),
        "section": np.array(["", ""]),
    }
    out = resolve(batch)
    assert embedder.calls == [["Two.", "A chunk."]]
    assert out["text"].tolist() == ["One. Two. Three.", "A chunk."]


def test_a_collection_records_its_passage_template_and_vectors_are_reused_only_under_the_same_one() -> None:
    plain = CollectionIdentity("m", 8, "c", "b", "w")
    contextual = CollectionIdentity("m", 8, "c", "b", "w", "{context}: {text}")
    assert PROP_DENSE_TEXT not in plain.properties()  # collections from before the option read as plain
    assert CollectionIdentity.from_properties(plain.properties()) == plain
    assert CollectionIdentity.from_properties(contextual.properties()) == contextual
    assert same_vectors(plain, plain) and not same_vectors(plain, contextual)


def test_a_cpu_job_gets_one_single_threaded_actor_per_cpu_and_no_more_than_its_batches() -> None:
    ingest = IngestConfig()  # 512 rows per batch, one CPU per actor, pool size from the cluster
    assert embed_pool(ingest, node_cpus=[2], cluster_gpus=0, rows=9636) == EmbedPool(2, 2, 1, None, 1)
    assert embed_pool(ingest, node_cpus=[8], cluster_gpus=0, rows=1500) == EmbedPool(3, 3, 1, None, 2)
    # one batch: one model, threaded over every CPU of the node, reserving one
    assert embed_pool(ingest, node_cpus=[2], cluster_gpus=0, rows=72) == EmbedPool(1, 1, 1, None, 2)
    wide = IngestConfig(embed_cpus_per_actor=4)
    assert embed_pool(wide, node_cpus=[16], cluster_gpus=0, rows=9636) == EmbedPool(4, 4, 4, None, 4)


def test_an_actor_never_asks_for_more_cpus_than_one_node_has() -> None:
    """A head with no CPUs and two 2-CPU workers: a one-batch job's actor runs on one node's 2 threads, not
    the cluster's 4, and reserves one CPU (a 4-CPU reservation no node could place: the job waited forever)."""
    ingest = IngestConfig()
    assert embed_pool(ingest, node_cpus=[0, 2, 2], cluster_gpus=0, rows=72) == EmbedPool(1, 1, 1, None, 2)
    assert embed_pool(ingest, node_cpus=[0, 2, 2], cluster_gpus=0, rows=9636) == EmbedPool(4, 4, 1, None, 1)
    wide = IngestConfig(embed_cpus_per_actor=4)
    assert embed_pool(wide, node_cpus=[0, 2, 2], cluster_gpus=0, rows=9636) == EmbedPool(2, 2, 2, None, 2)


def test_gpu_actors_and_a_configured_pool_are_taken_as_they_are() -> None:
    gpu = IngestConfig(gpus_per_actor=1)
    assert embed_pool(gpu, node_cpus=[16], cluster_gpus=2, rows=9636) == EmbedPool(2, 2, 0, 1, 0)
    fixed = IngestConfig(embed_actors_min=2, embed_actors_max=3)
    assert embed_pool(fixed, node_cpus=[2], cluster_gpus=0, rows=10) == EmbedPool(2, 3, 1, None, 1)


class NoStoredRows:
    """The store client `embed_on_warm_worker` connects per batch: no stored vector, and closed after."""

    closed = 0

    def query(self, collection: str, **_: object) -> list[dict[str, object]]:
        return []

    def close(self) -> None:
        NoStoredRows.closed += 1


def test_a_warm_worker_loads_its_model_once_across_jobs_and_again_for_other_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A one-batch CPU job embeds in a task: the second job on the same worker (another collection, another
    thread count) reuses the loaded model; weights replaced under the same path load again."""
    loads: list[EmbeddingConfig] = []
    threads: list[int] = []
    weights = {"fingerprint": "aaaa"}

    def load(cfg: EmbeddingConfig) -> HashEmbedder:
        loads.append(cfg)
        return HashEmbedder(dim=cfg.dim)

    monkeypatch.setattr(embed_stage, "SentenceTransformerEmbedder", load)
    monkeypatch.setattr(embed_stage, "connect", lambda cfg: NoStoredRows())
    monkeypatch.setattr(embed_stage, "open_embedding_cache", lambda cfg: DictEmbeddingCache())
    monkeypatch.setattr(embed_stage, "node_name", lambda: "worker-0")
    monkeypatch.setattr(embed_stage, "weights_fingerprint", lambda model: weights["fingerprint"])
    monkeypatch.setattr(embed_stage, "set_torch_threads", threads.append)
    embed_stage.warm_embedder.cache_clear()
    batch = {
        "id": np.array(["a", "b"]),
        "text": np.array(["one", ""]),
        "title": np.array(["T", ""]),
        "section": np.array(["", ""]),
        "error": np.array(["", "bad pdf"]),
    }

    def job(collection: str, num_threads: int) -> dict[str, np.ndarray]:
        config = RagcConfig.model_validate({"embedding": {"num_threads": num_threads}}).model_dump(mode="json")
        return embed_stage.embed_on_warm_worker(dict(batch), config, collection, ())

    first = job("c1", 1)
    assert first["id"].tolist() == ["a"] and first["embedded"].tolist() == [True]  # the failed row dropped
    assert first[embed_stage.EMBEDDED_ON].tolist() == ["worker-0"]
    job("c2", 2)
    assert len(loads) == 1 and threads == [1, 2], "one model, each job's own threads"
    weights["fingerprint"] = "bbbb"
    job("c2", 2)
    assert len(loads) == 2
    assert NoStoredRows.closed == 3, "each batch closes the store client it opened"
    embed_stage.warm_embedder.cache_clear()


def test_only_a_one_batch_cpu_job_embeds_on_a_warm_worker() -> None:
    cfg = RagcConfig()
    rows = cfg.ingest.embed_batch_rows
    cpu = embed_pool(cfg.ingest, [2], 0.0, rows)
    assert one_cpu_batch(cpu, rows, cfg)
    assert not one_cpu_batch(embed_pool(cfg.ingest, [2], 0.0, rows + 1), rows + 1, cfg)
    gpu_ingest = cfg.ingest.model_copy(update={"gpus_per_actor": 1.0})
    assert not one_cpu_batch(embed_pool(gpu_ingest, [2], 1.0, 10), 10, cfg)
