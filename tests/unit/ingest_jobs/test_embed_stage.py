"""The embedding actor's vector resolution."""

import numpy as np

from ingest_jobs.embed_stage import VectorResolver
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
