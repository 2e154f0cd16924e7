"""`ragc docs`: which source owns each ledger entry, what each document shows, and the text a user reads."""

from __future__ import annotations

from typing import Any

from cli.inventory_text import index_text, tenant_text
from ingest_jobs.inventory import UNOWNED, DocumentRecord, TenantInventory, documents_of, source_records
from ingest_jobs.ledger import LedgerEntry
from ingest_jobs.sources import NamedSource

HANDBOOK = NamedSource("handbook", "/docs/handbook")
WIKI = NamedSource("wiki", "/docs/wiki", prefix="wiki::")
DECLARED = ("author", "tags", "access")


def entry(doc_id: str, chunks: int) -> LedgerEntry:
    return LedgerEntry(doc_id, "h", tuple(f"{doc_id}#{i}" for i in range(chunks)))


def first_chunk(doc_id: str, **fields: Any) -> dict[str, Any]:
    return {"doc_id": doc_id, "title": doc_id.upper(), "doc_type": "md", "year": 0} | fields


def test_each_document_is_listed_under_the_source_that_owns_it_with_its_declared_fields() -> None:
    entries = {e.doc_id: e for e in (entry("a.md", 2), entry("wiki::b.md", 1), entry("big.md", 0))}
    first = {
        "a.md": first_chunk("a.md", author="Ann", tags=["ops"], access=["hr"], year=2021),
        "wiki::b.md": first_chunk("wiki::b.md", author="", tags=[], access=["*"]),
        "big.md": first_chunk("big.md", author="", tags=[], access=["*"]),
    }
    docs = documents_of(entries, [HANDBOOK, WIKI], first, {"big.md": 4000}, DECLARED)
    assert [(d.doc_id, d.source, d.chunks) for d in docs] == [
        ("a.md", "handbook", 2),
        ("big.md", "handbook", 4000),  # a ledger entry that keeps only its count: counted in the store
        ("wiki::b.md", "wiki", 1),
    ]
    assert (docs[0].author, docs[0].tags, docs[0].access, docs[0].year) == ("Ann", ["ops"], ["hr"], 2021)
    assert docs[1].year is None, "the store's 0 is no year"


def test_an_older_index_shows_no_declared_fields_and_an_unclaimed_entry_is_shown_not_hidden() -> None:
    docs = documents_of({"wiki::x.md": entry("wiki::x.md", 1)}, [HANDBOOK], {}, {}, ())
    assert docs == [DocumentRecord("wiki::x.md", "handbook", 1)]
    orphan = documents_of({"c.md": entry("c.md", 1)}, [WIKI], {}, {}, ())
    assert orphan[0].source == UNOWNED and orphan[0].author is None and orphan[0].tags is None
    assert [(s.name, s.documents, s.chunks) for s in source_records([WIKI], orphan)] == [("wiki", 0, 0), ("", 1, 1)]


def test_the_text_lists_sources_documents_restricted_groups_and_what_a_reindex_would_add() -> None:
    docs = [
        DocumentRecord("a.md", "handbook", 2, "Payroll", "md", 2021, "Ann", ["ops"], ["hr"]),
        DocumentRecord("b.md", "handbook", 1, "Open", "md", None, "", [], ["*"]),
    ]
    inventory = TenantInventory("acme", "ragc_chunks_v2", 7, [], source_records([HANDBOOK], docs), docs)
    text = tenant_text(inventory.summary())
    assert text.splitlines()[0] == "tenant acme in ragc_chunks_v2 (index version 7): 2 documents, 3 chunks"
    assert "  source handbook (/docs/handbook): 2 documents, 3 chunks" in text
    row = next(line for line in text.splitlines() if line.startswith("a.md"))
    assert "Payroll" in row and "author: Ann" in row and "tags: ops" in row and "access: hr" in row
    assert "access" not in next(line for line in text.splitlines() if line.startswith("b.md")), "public says nothing"
    assert "ragc reindex" not in text

    old = TenantInventory("acme", "ragc_chunks_v1", 3, ["author", "tags", "access"])
    assert tenant_text(old.summary()).endswith(
        "this index was built before author, tags, access were stored: `ragc reindex` adds them"
    )


def test_the_index_text_counts_every_tenant() -> None:
    payload = {
        "collection": "ragc_chunks_v2",
        "index_version": 7,
        "missing_fields": [],
        "tenants": [{"tenant": "acme", "documents": 7, "chunks": 12, "sources": ["handbook", "wiki"]}],
    }
    lines = index_text(payload).splitlines()
    assert lines[1].split() == ["TENANT", "DOCUMENTS", "CHUNKS", "SOURCES"]
    assert lines[2].split() == ["acme", "7", "12", "handbook,", "wiki"]
    assert index_text(payload | {"tenants": []}).endswith("no tenant has documents")
