"""Split parsed documents into chunks with llama-index node parsers; token counts use the embedding
model's own tokenizer, so `chunk_size` means what the embedder will see."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from llama_index.core import Document
from llama_index.core.node_parser import MarkdownNodeParser, SentenceSplitter, SentenceWindowNodeParser

from cluster.config import ChunkingConfig
from cluster.models import resolve_model_path
from ingest_jobs.documents import TAG_SEPARATOR, ParsedDocument, SourceDocument, chunk_id

Tokenizer = Callable[[str], list[int]]
SPACES = re.compile(r"[ \t]{2,}")


@dataclass(frozen=True)
class Chunk:
    id: str
    doc_id: str
    tenant_id: str
    text: str
    source: str
    title: str
    doc_type: str
    section: str
    year: int
    updated_at: int
    chunk_index: int
    content_hash: str
    author: str = ""
    tags: str = ""  # joined by documents.TAG_SEPARATOR: one string column in the job's rows
    access: str = ""  # the same; "" = every key of the tenant
    focus: str = ""  # sentence-window retrieval: the sentence the dense arm embeds ("" = the text); never stored


@lru_cache(maxsize=4)
def model_tokenizer(model_reference: str) -> Tokenizer:
    """The embedding model's fast tokenizer (tokenizer.json), or a whitespace splitter when the model
    directory has none (e.g. a bare model id with no local weights)."""
    path = Path(resolve_model_path(model_reference)) / "tokenizer.json"
    if not path.exists():
        return lambda text: list(range(len(text.split())))
    from tokenizers import Tokenizer as HFTokenizer

    tokenizer = HFTokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


def section_path(parents: object, body: str) -> str:
    """`Guide / Tenants` for a section headed `## Tenants` under `# Guide`."""
    parts = [p for p in str(parents).split("/") if p]
    first = body.lstrip().split("\n", 1)[0]
    if first.startswith("#"):
        parts.append(first.lstrip("#").strip())
    return " / ".join(parts)


def split_to_fit(text: str, max_bytes: int) -> list[str]:
    """`text` in consecutive parts of at most `max_bytes` UTF-8 bytes, each cut at its last whitespace when it
    has one in its second half, never inside a character. The token-sized splitter cannot do this for a run
    without spaces: a 50,000 character base64 image is one WordPiece token ([UNK]), so it stayed one chunk,
    longer than the store's text field, and failed the whole ingest job."""
    data = text.encode("utf-8")
    parts: list[str] = []
    start = 0
    while len(data) - start > max_bytes:
        end = start + max_bytes
        while end > start and data[end] & 0xC0 == 0x80:  # a continuation byte: back to its character's first
            end -= 1
        space = max(data.rfind(b" ", start, end), data.rfind(b"\n", start, end))
        cut = space if space > start + max_bytes // 2 else end
        parts.append(data[start:cut].decode("utf-8").strip())
        start = cut
    parts.append(data[start:].decode("utf-8").strip())
    return [part for part in parts if part]


class Chunker:
    def __init__(self, cfg: ChunkingConfig, tokenizer: Tokenizer, max_text_bytes: int = 0) -> None:
        """`max_text_bytes`: the store's limit on a chunk's text (0: none); a longer piece is cut to fit."""
        self._cfg = cfg
        self._max_text_bytes = max_text_bytes
        self._splitter = SentenceSplitter(
            chunk_size=cfg.chunk_size, chunk_overlap=cfg.chunk_overlap, tokenizer=tokenizer
        )
        self._markdown = MarkdownNodeParser()
        self._windows = (
            SentenceWindowNodeParser.from_defaults(window_size=cfg.sentence_window) if cfg.sentence_window else None
        )

    def pieces(self, body: str) -> list[tuple[str, str]]:
        """(text, focus) per chunk of a section: token-sized chunks with no focus, or each sentence's window
        with the sentence as its focus."""
        if self._windows is None:
            return [(piece, "") for piece in self._splitter.split_text(body)]
        nodes = self._windows.get_nodes_from_documents([Document(text=body)])
        # the parser keeps each sentence's trailing space and joins them with another
        return [(SPACES.sub(" ", str(n.metadata["window"])).strip(), n.get_content().strip()) for n in nodes]

    def bounded_pieces(self, body: str) -> list[tuple[str, str]]:
        """`pieces`, each that is longer than the store takes cut into parts that fit (a part is its own focus)."""
        out: list[tuple[str, str]] = []
        for piece, focus in self.pieces(body):
            if self._max_text_bytes and len(piece.encode("utf-8")) > self._max_text_bytes:
                out += [(part, "") for part in split_to_fit(piece, self._max_text_bytes)]
            else:
                out.append((piece, focus))
        return out

    def sections(self, doc: SourceDocument, text: str) -> list[tuple[str, str]]:
        """(header path, text) pieces before size-based splitting."""
        if doc.doc_type == "md" and self._cfg.markdown_headers:
            nodes = self._markdown.get_nodes_from_documents([Document(text=text)])
            pieces = [
                (section_path(n.metadata.get("header_path", "/"), n.get_content()), n.get_content()) for n in nodes
            ]
            return [(header, body) for header, body in pieces if body.strip()] or [("", text)]
        return [("", text)]

    def chunk(self, doc: SourceDocument, tenant: str, parsed: ParsedDocument) -> list[Chunk]:
        chunks: list[Chunk] = []
        seen: dict[str, int] = {}
        for section, body in self.sections(doc, parsed.text):
            for piece, focus in self.bounded_pieces(body):
                if not piece.strip():
                    continue
                # a window's vector is its sentence's: two windows with the same text are two chunks
                identity = f"{focus}\x00{piece}" if focus else piece
                occurrence = seen.get(identity, 0)
                seen[identity] = occurrence + 1
                chunks.append(
                    Chunk(
                        id=chunk_id(tenant, doc.doc_id, identity, occurrence),
                        doc_id=doc.doc_id,
                        tenant_id=tenant,
                        text=piece,
                        source=doc.source,
                        title=parsed.title,
                        doc_type=doc.doc_type,
                        section=section,
                        year=parsed.year,
                        updated_at=doc.updated_at,
                        chunk_index=len(chunks),
                        content_hash=doc.content_hash,
                        author=parsed.author,
                        tags=TAG_SEPARATOR.join(parsed.tags),
                        access=TAG_SEPARATOR.join(parsed.access),
                        focus=focus,
                    )
                )
        return chunks
