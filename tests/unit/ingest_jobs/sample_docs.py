"""Source documents for the ingest unit tests."""

from ingest_jobs.documents import SourceDocument


def doc(doc_id: str, content_hash: str = "h", doc_type: str = "txt") -> SourceDocument:
    return SourceDocument(doc_id=doc_id, source=doc_id, doc_type=doc_type, content_hash=content_hash)
