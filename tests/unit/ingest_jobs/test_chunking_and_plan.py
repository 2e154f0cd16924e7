import numpy as np
import pytest

from cluster.config import ChunkingConfig
from ingest_jobs.chunking import Chunker
from ingest_jobs.documents import ParsedDocument, SourceDocument, check_tenant, chunk_id
from ingest_jobs.embed_stage import VectorResolver
from ingest_jobs.ledger import LedgerEntry
from ingest_jobs.plan import classify
from tests.fakes import DictEmbeddingCache, DictStoredVectors, HashEmbedder


def words(text: str) -> list[int]:
    return list(range(len(text.split())))


def doc(doc_id: str, content_hash: str = "h", doc_type: str = "txt") -> SourceDocument:
    return SourceDocument(doc_id=doc_id, source=doc_id, doc_type=doc_type, content_hash=content_hash)


def test_chunk_ids_are_deterministic_and_tenant_scoped() -> None:
    assert chunk_id("t", "d", "x", 0) == chunk_id("t", "d", "x", 0)
    assert chunk_id("t", "d", "x", 0) != chunk_id("u", "d", "x", 0)
    assert chunk_id("t", "d", "x", 0) != chunk_id("t", "d", "x", 1)


def test_markdown_sections_carry_header_path() -> None:
    chunker = Chunker(ChunkingConfig(chunk_size=64, chunk_overlap=8), words)
    text = "# Guide\n\nintro text\n\n## Tenants\n\nkept apart by partition key\n"
    chunks = chunker.chunk(doc("g.md", doc_type="md"), "t1", ParsedDocument("Guide", text, 0))
    sections = [c.section for c in chunks]
    assert "Guide" in sections[0]
    assert any("Tenants" in s for s in sections)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))


def test_long_text_is_split_and_ids_survive_an_unrelated_edit() -> None:
    chunker = Chunker(ChunkingConfig(chunk_size=40, chunk_overlap=0), words)
    paragraphs = [" ".join(f"w{p}_{i}" for i in range(30)) + "." for p in range(4)]
    before = chunker.chunk(doc("a.txt"), "t", ParsedDocument("", "\n\n".join(paragraphs), 0))
    after = chunker.chunk(doc("a.txt"), "t", ParsedDocument("", "\n\n".join([*paragraphs[:3], "new tail words."]), 0))
    assert len(before) >= 3
    assert {c.id for c in before} & {c.id for c in after}, "unchanged chunks keep their ids"
    assert {c.id for c in before} != {c.id for c in after}


def test_classify() -> None:
    ledger = {
        "same": LedgerEntry("same", "h1", ("c1",)),
        "edited": LedgerEntry("edited", "old", ("c2",)),
        "gone": LedgerEntry("gone", "h3", ("c3",)),
        "broken-now": LedgerEntry("broken-now", "h4", ("c4",)),
    }
    docs = [doc("same", "h1"), doc("edited", "new"), doc("fresh", "h5")]
    plan = classify(docs, ledger, prune=True, failed_ids={"broken-now"})
    assert [d.doc_id for d in plan.new] == ["fresh"]
    assert [d.doc_id for d in plan.changed] == ["edited"]
    assert [d.doc_id for d in plan.unchanged] == ["same"]
    assert plan.deleted == ["gone"], "a document that failed to load is never pruned"
    kept = classify(docs, ledger, prune=False)
    assert kept.deleted == [] and kept.missing == ["broken-now", "gone"]


def test_tenant_ids_are_validated() -> None:
    assert check_tenant("acme-1") == "acme-1"
    for bad in ["", "a b", 'x" or 1==1', "-lead", "a" * 65]:
        with pytest.raises(ValueError):
            check_tenant(bad)


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


def test_model_tokenizer_counts_tokens_without_padding() -> None:
    from ingest_jobs.chunking import model_tokenizer

    assert len(model_tokenizer("packaged:all-MiniLM-L6-v2")("hello world")) == 2
