"""The seed's reference pipeline, for `ragc bench query`: llama-index components in one process behind a
plain FastAPI app - VectorStoreIndex over the same Milvus collection, QueryFusionRetriever of dense +
BM25 with reciprocal rank, SentenceTransformerRerank with the same cross-encoder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cluster.config import RagcConfig, load_config
from cluster.models import SentenceTransformerEmbedder, resolve_model_path
from cluster.store.client import connect, iterate_rows
from cluster.store.expr import eq
from cluster.store.schema import ChunkFields


def tenant_nodes(cfg: RagcConfig, tenant: str) -> list[Any]:
    from llama_index.core.schema import TextNode

    fields = [ChunkFields.ID, ChunkFields.TEXT, ChunkFields.DOC_ID, ChunkFields.TITLE]
    rows = iterate_rows(connect(cfg), cfg.milvus.collection, eq(ChunkFields.TENANT, tenant), fields)
    return [TextNode(id_=r["id"], text=r["text"], metadata={"doc_id": r["doc_id"], "title": r["title"]}) for r in rows]


def build_reference(cfg: RagcConfig, tenant: str) -> Any:
    from fastapi import FastAPI
    from llama_index.core import VectorStoreIndex
    from llama_index.core.llms import MockLLM
    from llama_index.core.postprocessor import SentenceTransformerRerank
    from llama_index.core.retrievers import QueryFusionRetriever
    from llama_index.core.vector_stores import ExactMatchFilter, MetadataFilters
    from llama_index.retrievers.bm25 import BM25Retriever

    from bench.llamaindex_compat import RagcEmbedding, attach_vector_store

    rcfg = cfg.serve.retrieve
    index = VectorStoreIndex.from_vector_store(
        attach_vector_store(cfg), embed_model=RagcEmbedding(SentenceTransformerEmbedder(cfg.embedding))
    )
    dense = index.as_retriever(
        similarity_top_k=rcfg.dense_candidates,
        filters=MetadataFilters(filters=[ExactMatchFilter(key=ChunkFields.TENANT, value=tenant)]),
    )
    bm25 = BM25Retriever.from_defaults(nodes=tenant_nodes(cfg, tenant), similarity_top_k=rcfg.bm25_candidates)
    fusion = QueryFusionRetriever(
        [dense, bm25],
        similarity_top_k=cfg.serve.rerank.depth,
        num_queries=1,
        mode="reciprocal_rerank",  # type: ignore[arg-type]
        use_async=False,
        llm=MockLLM(),  # num_queries=1 generates no extra queries; this only stops it resolving an OpenAI LLM
    )
    assert cfg.serve.rerank.model is not None
    rerank = SentenceTransformerRerank(
        model=resolve_model_path(cfg.serve.rerank.model), top_n=cfg.serve.default_top_k, device="cpu"
    )
    app = FastAPI()

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/query")
    def query(body: dict[str, Any]) -> dict[str, Any]:
        nodes = rerank.postprocess_nodes(fusion.retrieve(body["query"]), query_str=body["query"])
        return {"passages": [{"chunk_id": n.node.node_id, "score": float(n.score or 0.0)} for n in nodes]}

    return app


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.reference_app")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = build_reference(load_config(args.config), args.tenant)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
