"""llama-index interop: our embedder as a llama-index embedding, and a `MilvusVectorStore` attached to
the collection ragc ingests into (the field names match its defaults)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from cluster.config import RagcConfig
from cluster.models import Embedder
from cluster.store.client import connect, milvus_uri
from cluster.store.collections import Collections
from cluster.store.schema import ChunkFields


class RagcEmbedding(BaseEmbedding):
    _embedder: Any = PrivateAttr()

    def __init__(self, embedder: Embedder, **kwargs: Any) -> None:
        super().__init__(model_name=embedder.model_id, **kwargs)
        self._embedder = embedder

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embedder.embed([query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embedder.embed([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embedder.embed(texts)


def attach_vector_store(cfg: RagcConfig) -> Any:
    """A llama-index `MilvusVectorStore` over the collection the serving alias points at (it checks
    `has_collection`, which does not resolve aliases, and would otherwise try to create one)."""
    from llama_index.vector_stores.milvus import MilvusVectorStore

    physical = Collections(connect(cfg), cfg).resolve()
    if physical is None:
        raise ValueError(f"alias {cfg.milvus.collection!r} does not exist yet: ingest something first")

    return MilvusVectorStore(
        uri=milvus_uri(cfg),
        token=cfg.milvus.token.resolve() or "",
        collection_name=physical,
        dim=cfg.embedding.dim,
        overwrite=False,
        enable_sparse=False,
        similarity_metric="COSINE",
        text_key=ChunkFields.TEXT,
        doc_id_field=ChunkFields.DOC_ID,
        embedding_field=ChunkFields.DENSE,
        output_fields=[ChunkFields.DOC_ID, ChunkFields.TENANT, ChunkFields.SOURCE, ChunkFields.TITLE],
    )
