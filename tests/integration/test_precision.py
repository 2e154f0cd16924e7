"""int8 encoders with the packaged model: a text's vector and a pair's score never depend on their batchmates,
and stay close to float32's."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.config import EmbeddingConfig, RerankConfig

pytestmark = pytest.mark.integration

TEXTS = [
    "Every chunk carries a tenant id used as the Milvus partition key.",
    "Responses are cached per replica, in Redis, and semantically by embedding.",
    "A much longer passage about reindexing " + "without downtime, generation by generation, " * 12,
]


def test_an_int8_vector_is_the_same_alone_and_in_a_batch_and_close_to_float32() -> None:
    from cluster.models import SentenceTransformerEmbedder

    int8 = SentenceTransformerEmbedder(EmbeddingConfig(dtype="int8"))
    fp32 = SentenceTransformerEmbedder(EmbeddingConfig(dtype="float32"))
    alone = np.asarray(int8.embed(TEXTS[:1])[0])
    assert np.array_equal(alone, np.asarray(int8.embed(TEXTS)[0]))
    assert np.array_equal(np.asarray(int8.embed(TEXTS[::-1])[-1]), alone)
    assert float(alone @ np.asarray(fp32.embed(TEXTS[:1])[0])) > 0.95
    # cached vectors of one precision are never served to the other
    assert int8.model_id.endswith("+int8") and int8.model_id != fp32.model_id


def test_an_int8_pair_score_is_the_same_alone_and_in_a_batch() -> None:
    from serve.stages.rerank import CrossEncoderScorer

    scorer = CrossEncoderScorer(RerankConfig(model="packaged:all-minilm-l6-v2", dtype="int8"))
    pairs = [("How are tenants kept apart?", text) for text in TEXTS]
    alone = scorer.score(pairs[:1])
    assert scorer.score(pairs)[0] == alone[0] == scorer.score(pairs[::-1])[-1]
