"""Find documents in a source folder (cheap: read + hash) and parse them to text (in Ray tasks)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest_jobs.documents import Failure, SourceDocument, sha

TEXT_TYPES = {".txt": "txt", ".text": "txt", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}
BINARY_TYPES = {".pdf": "pdf"}
CORPUS_SUFFIX = ".jsonl"


class ParseError(ValueError):
    """A document that cannot be turned into text; the message is the reason shown to the user."""


@dataclass
class ScanResult:
    documents: list[SourceDocument] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def scan(root: Path, max_file_bytes: int) -> ScanResult:
    """Every supported document under `root` (a folder, or a single file), with its content hash."""
    root = root.resolve()
    if not root.exists():
        raise FileNotFoundError(f"source {root} does not exist")
    result = ScanResult()
    seen: set[str] = set()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    base = root.parent if root.is_file() else root
    for path in files:
        rel = path.relative_to(base).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts):
            continue
        suffix = path.suffix.lower()
        if suffix == CORPUS_SUFFIX:
            for item in _scan_corpus(path, rel, max_file_bytes):
                _add(result, seen, item)
        elif suffix in TEXT_TYPES or suffix in BINARY_TYPES:
            _add(result, seen, _scan_file(path, rel, max_file_bytes))
        else:
            result.skipped.append(rel)
    return result


def _add(result: ScanResult, seen: set[str], item: SourceDocument | Failure) -> None:
    if isinstance(item, Failure):
        result.failures.append(item)
    elif item.doc_id in seen:
        result.failures.append(Failure(item.doc_id, f"duplicate document id in {item.source}"))
    else:
        seen.add(item.doc_id)
        result.documents.append(item)


def _scan_file(path: Path, rel: str, max_file_bytes: int) -> SourceDocument | Failure:
    try:
        size = path.stat().st_size
        if size > max_file_bytes:
            return Failure(rel, f"file too large ({size} bytes > {max_file_bytes})")
        data = path.read_bytes()
    except OSError as exc:
        return Failure(rel, f"unreadable: {exc.strerror or exc}")
    if not data.strip():
        return Failure(rel, "empty file")
    suffix = path.suffix.lower()
    doc_type = TEXT_TYPES.get(suffix) or BINARY_TYPES[suffix]
    if doc_type != "pdf":
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return Failure(rel, f"not valid UTF-8 (byte {exc.start})")
    return SourceDocument(
        doc_id=rel,
        source=rel,
        doc_type=doc_type,
        content_hash=sha(data),
        title=path.stem.replace("_", " ").replace("-", " "),
        updated_at=int(path.stat().st_mtime),
        path=str(path),
    )


def _scan_corpus(path: Path, rel: str, max_file_bytes: int) -> Iterator[SourceDocument | Failure]:
    """BEIR corpus lines: `{"_id", "title", "text", "metadata"?}`."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        yield Failure(rel, f"unreadable: {exc.strerror or exc}")
        return
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            where = f"{rel}:{lineno}"
            if not raw.strip():
                continue
            if len(raw) > max_file_bytes:
                yield Failure(where, "record too large")
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield Failure(where, f"not valid UTF-8 (byte {exc.start})")
                continue
            except json.JSONDecodeError as exc:
                yield Failure(where, f"invalid JSON: {exc.msg}")
                continue
            yield _corpus_record(record, rel, where)


def _corpus_record(record: Any, rel: str, where: str) -> SourceDocument | Failure:
    if not isinstance(record, dict) or not isinstance(record.get("_id"), str | int):
        return Failure(where, "record has no `_id`")
    doc_id = str(record["_id"])
    title = str(record.get("title") or "")
    body = str(record.get("text") or "")
    if not body.strip() and not title.strip():
        return Failure(doc_id, "empty record")
    metadata: dict[str, Any] = record["metadata"] if isinstance(record.get("metadata"), dict) else {}
    text = f"{title}\n\n{body}" if title else body
    return SourceDocument(
        doc_id=doc_id,
        source=f"{rel}#{doc_id}",
        doc_type="jsonl",
        content_hash=sha(json.dumps([title, body, metadata], sort_keys=True)),
        title=title,
        updated_at=_int(metadata.get("updated_at")),
        year=_int(metadata.get("year")),
        text=text,
    )


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def parse(doc: SourceDocument) -> tuple[str, str]:
    """(title, text) of a document; raises ParseError with the reason when it has no usable text."""
    if doc.text is not None:
        return doc.title, doc.text
    try:
        data = Path(doc.path).read_bytes()
    except OSError as exc:
        raise ParseError(f"unreadable: {exc.strerror or exc}") from exc
    if doc.content_hash != sha(data):
        raise ParseError("changed while the job ran; run again")
    title, text = _PARSERS[doc.doc_type](data, doc.title)
    if not text.strip():
        raise ParseError("no text content")
    return title, text


def _parse_plain(data: bytes, title: str) -> tuple[str, str]:
    return title, data.decode("utf-8")


def _parse_markdown(data: bytes, title: str) -> tuple[str, str]:
    text = data.decode("utf-8")
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip(), text
    return title, text


def _parse_html(data: bytes, title: str) -> tuple[str, str]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data.decode("utf-8"), "html.parser")
    for tag in soup(["script", "style", "noscript"]):
        tag.decompose()
    if soup.title and soup.title.string:
        title = soup.title.string.strip()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return title, "\n".join(line for line in lines if line)


def _parse_pdf(data: bytes, title: str) -> tuple[str, str]:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        meta_title = reader.metadata.title if reader.metadata else None
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"corrupt PDF: {exc}") from exc
    return (meta_title or title), "\n\n".join(pages)


_PARSERS = {"txt": _parse_plain, "md": _parse_markdown, "html": _parse_html, "pdf": _parse_pdf}
