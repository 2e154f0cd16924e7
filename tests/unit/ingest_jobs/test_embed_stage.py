"""The embedding actor's vector resolution."""

import numpy as np
import pytest
from pydantic import ValidationError

from cluster.config import EmbeddingConfig
from cluster.store.schema import PROP_DENSE_TEXT, CollectionIdentity
from ingest_jobs.embed_stage import VectorResolver
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


def test_a_collection_records_its_passage_template_and_vectors_are_reused_only_under_the_same_one() -> None:
    plain = CollectionIdentity("m", 8, "c", "b", "w")
    contextual = CollectionIdentity("m", 8, "c", "b", "w", "{context}: {text}")
    assert PROP_DENSE_TEXT not in plain.properties()  # collections from before the option read as plain
    assert CollectionIdentity.from_properties(plain.properties()) == plain
    assert CollectionIdentity.from_properties(contextual.properties()) == contextual
    assert same_vectors(plain, plain) and not same_vectors(plain, contextual)
