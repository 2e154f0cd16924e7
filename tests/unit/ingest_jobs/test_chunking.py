"""The chunker: markdown sections, splitting, stable ids, the model's tokenizer."""

from cluster.config import ChunkingConfig
from ingest_jobs.chunking import Chunker, split_to_fit
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


SENTENCES = [f"Sentence {n} says fact {n} about topic {n}." for n in range(6)]


def test_sentence_windows_return_each_sentence_with_its_neighbours() -> None:
    chunker = Chunker(ChunkingConfig(sentence_window=1), words)
    chunks = chunker.chunk(doc("s.txt"), "t", ParsedDocument("Title", " ".join(SENTENCES), 0))
    assert [c.focus for c in chunks] == SENTENCES, "one chunk per sentence, in order"
    assert [c.chunk_index for c in chunks] == list(range(6))
    assert chunks[0].text == " ".join(SENTENCES[:2])
    assert chunks[3].text == " ".join(SENTENCES[2:5])
    assert chunks[5].text == " ".join(SENTENCES[4:])
    assert len({c.id for c in chunks}) == 6


def test_a_window_chunk_id_depends_on_its_sentence_and_survives_an_unrelated_edit() -> None:
    chunker = Chunker(ChunkingConfig(sentence_window=1), words)
    short = chunker.chunk(doc("s.txt"), "t", ParsedDocument("", "Only one. And two.", 0))
    assert short[0].text == short[1].text and short[0].id != short[1].id, "same window, two sentences"
    before = chunker.chunk(doc("s.txt"), "t", ParsedDocument("", " ".join(SENTENCES), 0))
    edited = chunker.chunk(doc("s.txt"), "t", ParsedDocument("", " ".join([*SENTENCES[:5], "A new end."]), 0))
    assert [c.id for c in before[:4]] == [c.id for c in edited[:4]], "windows away from the edit keep their ids"
    assert before[4].id != edited[4].id and before[5].id != edited[5].id
    plain = Chunker(ChunkingConfig(), words).chunk(doc("s.txt"), "t", ParsedDocument("", " ".join(SENTENCES), 0))
    assert all(c.focus == "" for c in plain) and not {c.id for c in plain} & {c.id for c in before}


def test_the_window_is_recorded_in_the_chunker_fingerprint() -> None:
    assert ChunkingConfig(sentence_window=2).fingerprint() == "window:2:md=1"
    assert ChunkingConfig().fingerprint() == "sentence:256:32:md=1"


def test_a_run_without_spaces_longer_than_the_store_takes_is_cut_to_fit() -> None:
    """A base64 image in Markdown is one WordPiece token however long: the token splitter leaves it whole."""
    blob = "QUJD" * 12_500  # 50,000 characters
    text = "Intro words here.\n\n" + blob + "\n\nOutro words."
    limit = 16_384
    chunker = Chunker(ChunkingConfig(), lambda t: [0] * len(t.split()), max_text_bytes=limit)
    chunks = chunker.chunk(doc("a.md", doc_type="md"), "t", ParsedDocument("", text, 0))
    assert all(len(c.text.encode()) <= limit for c in chunks)
    assert "".join("".join(c.text for c in chunks).split()) == "".join(text.split()), "nothing is lost"
    assert len({c.id for c in chunks}) == len(chunks) and [c.chunk_index for c in chunks] == list(range(len(chunks)))
    unbounded = Chunker(ChunkingConfig(), lambda t: [0] * len(t.split()))
    short = ParsedDocument("", "Intro words here.\n\nOutro words.", 0)

    def ids(c: Chunker) -> list[str]:
        return [chunk.id for chunk in c.chunk(doc("b.md"), "t", short)]

    assert ids(chunker) == ids(unbounded), "what fits is chunked as before: its ids do not move"


def test_parts_are_cut_at_whitespace_and_never_inside_a_character() -> None:
    assert split_to_fit("aaaa bbbb cccc", 9) == ["aaaa bbbb", "cccc"]
    assert split_to_fit("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    parts = split_to_fit("中" * 10, 7)  # three bytes each: two fit in seven
    assert parts == ["中中"] * 5 and split_to_fit("short", 100) == ["short"]
