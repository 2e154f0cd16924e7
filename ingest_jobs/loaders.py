"""Find documents in a source folder (cheap: read + hash) and parse them to text (in Ray tasks)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest_jobs.documents import Failure, ParsedDocument, SourceDocument, sha
from ingest_jobs.metadata import (
    SIDECAR_SUFFIX,
    DocumentMetadata,
    MetadataError,
    html_meta,
    merged,
    pdf_meta,
    read_sidecar,
    split_front_matter,
    validate,
)

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
        if rel.endswith(SIDECAR_SUFFIX) and path.with_name(path.name[: -len(SIDECAR_SUFFIX)]).is_file():
            continue  # read with the document it describes
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
    sidecar_path = path.with_name(path.name + SIDECAR_SUFFIX)
    sidecar: dict[str, Any] = {}
    if sidecar_path.is_file():
        try:
            declared = read_sidecar(sidecar_path.read_bytes(), sidecar_path.name)
        except (OSError, MetadataError) as exc:
            return Failure(rel, str(exc))
        sidecar = declared.model_dump(mode="json", exclude_defaults=True)
    return SourceDocument(
        doc_id=rel,
        source=rel,
        doc_type=doc_type,
        content_hash=file_hash(data, sidecar),
        title=path.stem.replace("_", " ").replace("-", " "),
        updated_at=int(path.stat().st_mtime),
        path=str(path),
        extra={"sidecar": sidecar} if sidecar else {},
    )


def file_hash(data: bytes, sidecar: dict[str, Any]) -> str:
    """The file's hash, joined with its sidecar's fields when it has one (editing either re-ingests it)."""
    return sha(data) if not sidecar else sha(sha(data) + json.dumps(sidecar, sort_keys=True))


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


def parse(doc: SourceDocument) -> ParsedDocument:
    """Title, text and year of a document; raises ParseError with the reason when it has no usable text or
    declares metadata of the wrong type. Sidecar fields win over those inside the document."""
    if doc.text is not None:
        return ParsedDocument(doc.title, doc.text, doc.year)
    try:
        data = Path(doc.path).read_bytes()
    except OSError as exc:
        raise ParseError(f"unreadable: {exc.strerror or exc}") from exc
    sidecar = doc.extra.get("sidecar", {})
    if doc.content_hash != file_hash(data, sidecar):
        raise ParseError("changed while the job ran; run again")
    try:
        text, inside = _PARSERS[doc.doc_type](data)
        meta = merged(validate(inside, doc.doc_id), DocumentMetadata.model_validate(sidecar))
    except MetadataError as exc:
        raise ParseError(str(exc)) from exc
    if not text.strip():
        raise ParseError("no text content")
    year = meta.effective_year
    return ParsedDocument(meta.title or doc.title, text, doc.year if year is None else year)


Extracted = tuple[str, dict[str, Any]]  # text, metadata fields the document declares


def _parse_plain(data: bytes) -> Extracted:
    return data.decode("utf-8"), {}


def _parse_markdown(data: bytes) -> Extracted:
    declared, text = split_front_matter(data.decode("utf-8"))
    if "title" not in declared:
        heading = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), "")
        declared = declared | ({"title": heading} if heading else {})
    return text, declared


def _parse_html(data: bytes) -> Extracted:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data.decode("utf-8"), "html.parser")
    pairs = [
        (str(tag.get("name") or tag.get("property") or ""), str(tag.get("content") or ""))
        for tag in soup.find_all("meta")
    ]
    declared = html_meta(pairs)
    for tag in soup(["script", "style", "noscript"]):
        tag.decompose()
    if soup.title and soup.title.string and soup.title.string.strip():
        declared["title"] = soup.title.string.strip()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line), declared


def _parse_pdf(data: bytes) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        declared = pdf_meta(reader.metadata)
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        raise ParseError(f"corrupt PDF: {exc}") from exc
    return "\n\n".join(pages), declared


_PARSERS = {"txt": _parse_plain, "md": _parse_markdown, "html": _parse_html, "pdf": _parse_pdf}
