"""The chunker: markdown sections, splitting, stable ids, the model's tokenizer."""

from cluster.config import ChunkingConfig
from ingest_jobs.chunking import Chunker
from ingest_jobs.documents import ParsedDocument
from tests.unit.ingest_jobs.sample_docs import doc


def words(text: str) -> list[int]:
    return list(range(len(text.split())))


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


def test_model_tokenizer_counts_tokens_without_padding() -> None:
    from ingest_jobs.chunking import model_tokenizer

    assert len(model_tokenizer("packaged:all-MiniLM-L6-v2")("hello world")) == 2
