"""Encoders in bf16 and int8 with the packaged model on a CPU: a text's vector (bf16, int8) and a pair's score
(int8) never depend on their batchmates, and vectors stay close to float32's."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.config import EmbeddingConfig, RerankConfig

pytestmark = pytest.mark.integration

# of many lengths: batched, the short ones are padded to the longest (and bf16 then reads them differently)
TEXTS = [
    "Every chunk carries a tenant id used as the Milvus partition key.",
    *(
        f"Passage {n} on reindexing without downtime: " + "each generation is built beside the live one. " * n
        for n in range(1, 24, 2)
    ),
]


@pytest.mark.parametrize(("dtype", "closeness"), [("bfloat16", 0.999), ("int8", 0.95)])
def test_a_vector_is_the_same_alone_and_in_a_batch_and_close_to_float32(dtype: str, closeness: float) -> None:
    from cluster.models import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(EmbeddingConfig(dtype=dtype, device="cpu"))
    fp32 = SentenceTransformerEmbedder(EmbeddingConfig(dtype="float32", device="cpu"))
    alone = np.asarray([embedder.embed([text])[0] for text in TEXTS])
    assert np.array_equal(np.asarray(embedder.embed(TEXTS)), alone)
    assert np.array_equal(np.asarray(embedder.embed(TEXTS[::-1]))[::-1], alone)
    assert float(np.min(np.sum(alone * np.asarray(fp32.embed(TEXTS)), axis=1))) > closeness
    # cached int8 vectors are never served to another precision (bf16's are as close as fp32's own)
    assert embedder.model_id.endswith("+int8") == (dtype == "int8")


def test_an_int8_pair_score_is_the_same_alone_and_in_a_batch() -> None:
    from serve.stages.rerank import CrossEncoderScorer

    scorer = CrossEncoderScorer(RerankConfig(model="packaged:all-minilm-l6-v2", dtype="int8"))
    pairs = [("How are tenants kept apart?", text) for text in TEXTS]
    alone = [scorer.score([pair])[0] for pair in pairs]
    assert scorer.score(pairs) == alone == scorer.score(pairs[::-1])[::-1]
