"""Find documents in a source (cheap: a local folder is read + hashed, an object store only listed) and parse
them to text (in Ray tasks)."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ingest_jobs.documents import Failure, ParsedDocument, SourceDocument, sha
from ingest_jobs.locations import filesystem, normalized, read_bytes, remote_scheme
from ingest_jobs.metadata import (
    SIDECAR_SUFFIX,
    YEAR_MAX,
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
SURROGATE = re.compile("[\ud800-\udfff]")


class ParseError(ValueError):
    """A document that cannot be turned into text; the message is the reason shown to the user."""


@dataclass
class ScanResult:
    documents: list[SourceDocument] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    listed: int = 0  # files or objects found
    read: int = 0  # bodies read to find them (every local file; only corpus files of an object store)


def scan(location: str | Path, max_file_bytes: int) -> ScanResult:
    """Every supported document under `location` (a folder, a single file, or an object-store URL), with
    its content hash (for objects: of their ETag, size and sidecar, so an unchanged object is never read)."""
    if remote_scheme(str(location)):
        return scan_objects(str(location), max_file_bytes)
    root = Path(normalized(location))
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
        result.listed += 1
        suffix = path.suffix.lower()
        if not _encodable(rel):  # a name's undecodable bytes would fail the whole job where it is hashed
            if suffix == CORPUS_SUFFIX or suffix in TEXT_TYPES or suffix in BINARY_TYPES:
                _add(result, seen, Failure(_printable(rel), "file name is not valid UTF-8: rename it"))
            else:
                result.skipped.append(_printable(rel))
        elif suffix == CORPUS_SUFFIX:
            result.read += 1
            for item in _scan_corpus(path, rel, max_file_bytes):
                _add(result, seen, item)
        elif suffix in TEXT_TYPES or suffix in BINARY_TYPES:
            result.read += 1
            _add(result, seen, _scan_file(path, rel, max_file_bytes))
        else:
            result.skipped.append(rel)
    return result


def _encodable(name: str) -> bool:
    """Whether a path, as Python decoded it from the file system (undecodable bytes become lone surrogates),
    is text that can be stored and hashed."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(name: str) -> str:
    """The name with each lone surrogate (an undecodable byte of a file name, or a JSON escape without its
    pair) shown as U+FFFD, for a report."""
    return SURROGATE.sub("\ufffd", name)


def scan_objects(url: str, max_file_bytes: int) -> ScanResult:
    """An object-store prefix, from its listing alone: change detection needs each object's ETag (else its
    size and modification time), so bodies are read later, and only for new or changed documents. A corpus
    file (`.jsonl`) is read here, since its documents are its lines."""
    fs, root = filesystem(url)
    if not fs.exists(root):
        raise FileNotFoundError(f"source {url} does not exist (or these credentials cannot list it)")
    listing = {path: info for path, info in fs.find(root, detail=True).items() if info.get("type", "file") == "file"}
    if root in listing:  # the URL names one object
        objects = {root.rsplit("/", 1)[-1]: (root, listing[root])}
    else:
        objects = {path[len(root) :].strip("/"): (path, info) for path, info in listing.items()}
    result = ScanResult()
    seen: set[str] = set()
    for rel, (path, info) in sorted(objects.items()):
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        if rel.endswith(SIDECAR_SUFFIX) and rel[: -len(SIDECAR_SUFFIX)] in objects:
            continue  # read with the document it describes
        result.listed += 1
        suffix = Path(rel).suffix.lower()
        if suffix == CORPUS_SUFFIX:
            result.read += 1
            with fs.open(path, "rb") as handle:
                for item in _corpus_records(handle, rel, max_file_bytes):
                    _add(result, seen, item)
        elif suffix in TEXT_TYPES or suffix in BINARY_TYPES:
            sidecar = objects.get(rel + SIDECAR_SUFFIX)
            sidecar_url = fs.unstrip_protocol(sidecar[0]) if sidecar else ""
            listed = _listed_object(fs.unstrip_protocol(path), rel, info, sidecar, sidecar_url, max_file_bytes)
            _add(result, seen, listed)
        else:
            result.skipped.append(rel)
    return result


def _listed_object(
    url: str,
    rel: str,
    info: dict[str, Any],
    sidecar: tuple[str, dict[str, Any]] | None,
    sidecar_url: str,
    max_file_bytes: int,
) -> SourceDocument | Failure:
    size = int(info.get("size") or 0)
    if size > max_file_bytes:
        return Failure(rel, f"file too large ({size} bytes > {max_file_bytes})")
    if size == 0:
        return Failure(rel, "empty file")
    stem = Path(rel).stem
    return SourceDocument(
        doc_id=rel,
        source=rel,
        doc_type=TEXT_TYPES.get(Path(rel).suffix.lower()) or BINARY_TYPES[Path(rel).suffix.lower()],
        content_hash=sha(json.dumps([object_version(info), object_version(sidecar[1]) if sidecar else None])),
        title=stem.replace("_", " ").replace("-", " "),
        updated_at=_modified(info),
        path=url,
        extra={"sidecar_url": sidecar_url} if sidecar_url else {},
    )


def object_version(info: dict[str, Any]) -> list[Any]:
    """What changes when an object's content does: its ETag where the store has one, else size and mtime."""
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    if etag:
        return [str(etag).strip('"')]
    modified = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
    return [info.get("size"), str(modified)]  # at the store's own resolution, not whole seconds


def _modified(info: dict[str, Any]) -> int:
    value: Any = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
    if isinstance(value, datetime):
        return int(value.timestamp())
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


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
    try:
        handle = path.open("rb")
    except OSError as exc:
        yield Failure(rel, f"unreadable: {exc.strerror or exc}")
        return
    with handle:
        yield from _corpus_records(handle, rel, max_file_bytes)


def _corpus_records(lines: Iterable[bytes], rel: str, max_file_bytes: int) -> Iterator[SourceDocument | Failure]:
    """BEIR corpus lines: `{"_id", "title", "text", "metadata"?}`."""
    for lineno, raw in enumerate(lines, start=1):
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
    for key, value in (("_id", doc_id), ("title", title), ("text", body)):
        if not _encodable(value):  # JSON's "\ud800": hashing it would fail the whole job
            return Failure(_printable(doc_id), f"{key} holds an unpaired surrogate escape: not valid Unicode")
    metadata: dict[str, Any] = record["metadata"] if isinstance(record.get("metadata"), dict) else {}
    year, updated_at = _int(metadata.get("year")), _int(metadata.get("updated_at"))
    if not 0 <= year <= YEAR_MAX:  # as a file's declared year; a store's INT64 would refuse the whole batch
        return Failure(doc_id, f"metadata year {year} is not between 0 and {YEAR_MAX}")
    if not -(2**63) <= updated_at < 2**63:
        return Failure(doc_id, "metadata updated_at does not fit a 64-bit integer")
    try:
        declared = validate({k: metadata[k] for k in ("author", "tags", "access") if k in metadata}, doc_id)
    except MetadataError as exc:
        return Failure(doc_id, str(exc))
    text = f"{title}\n\n{body}" if title else body
    return SourceDocument(
        doc_id=doc_id,
        source=f"{rel}#{doc_id}",
        doc_type="jsonl",
        content_hash=sha(json.dumps([title, body, metadata], sort_keys=True)),
        title=title,
        updated_at=updated_at,
        year=year,
        author=declared.author or "",
        tags=declared.tags,
        access=declared.access,
        text=text,
    )


def _int(value: Any) -> int:
    """A whole number, or 0 for what is not one (JSON's NaN included; its Infinity raised OverflowError and
    stopped the scan)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def parse(doc: SourceDocument) -> ParsedDocument:
    """Title, text and year of a document; raises ParseError with the reason when it has no usable text or
    declares metadata of the wrong type. Sidecar fields win over those inside the document."""
    if doc.text is not None:
        return ParsedDocument(doc.title, doc.text, doc.year, doc.author, tuple(doc.tags), tuple(doc.access))
    try:
        data = read_bytes(doc.path)
        sidecar = _remote_sidecar(doc) if remote_scheme(doc.path) else doc.extra.get("sidecar", {})
    except OSError as exc:
        raise ParseError(f"unreadable: {exc.strerror or exc}") from exc
    if not remote_scheme(doc.path) and doc.content_hash != file_hash(data, sidecar):
        raise ParseError("changed while the job ran; run again")
    try:
        text, inside = _PARSERS[doc.doc_type](data)
        meta = merged(validate(inside, doc.doc_id), DocumentMetadata.model_validate(sidecar))
    except MetadataError as exc:
        raise ParseError(str(exc)) from exc
    except UnicodeDecodeError as exc:  # checked while scanning a folder; an object's body is first read here
        raise ParseError(f"not valid UTF-8 (byte {exc.start})") from exc
    if not text.strip():
        raise ParseError("no text content")
    year = meta.effective_year
    return ParsedDocument(
        meta.title or doc.title,
        text,
        doc.year if year is None else year,
        meta.author or "",
        tuple(meta.tags),
        tuple(meta.access),
    )


def _remote_sidecar(doc: SourceDocument) -> dict[str, Any]:
    url = doc.extra.get("sidecar_url")
    if not url:
        return {}
    try:
        declared = read_sidecar(read_bytes(url), url.rsplit("/", 1)[-1])
    except MetadataError as exc:
        raise ParseError(str(exc)) from exc
    return declared.model_dump(mode="json", exclude_defaults=True)


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
    # a font's ToUnicode map may name a lone surrogate, which pypdf passes through: shown as U+FFFD, since
    # such text cannot be hashed or stored
    declared = {k: _printable(v) if isinstance(v, str) else v for k, v in declared.items()}
    return _printable("\n\n".join(pages)), declared


_PARSERS = {"txt": _parse_plain, "md": _parse_markdown, "html": _parse_html, "pdf": _parse_pdf}
