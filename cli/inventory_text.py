"""`ragc docs` as text: a tenant's documents, or every tenant of the index, as aligned columns."""

from __future__ import annotations

from typing import Any

from cluster.labels import PUBLIC

REINDEX_NOTE = "this index was built before {fields} were stored: `ragc reindex` adds them"


def columns(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _labels(doc: dict[str, Any]) -> str:
    """The declared fields that say something: an author, tags, and access groups other than public."""
    parts = []
    if doc.get("author"):
        parts.append(f"author: {doc['author']}")
    if doc.get("tags"):
        parts.append("tags: " + ", ".join(doc["tags"]))
    restricted = [g for g in doc.get("access") or () if g != PUBLIC]
    if restricted:
        parts.append("access: " + ", ".join(restricted))
    return "  ".join(parts)


def _missing_note(payload: dict[str, Any]) -> list[str]:
    missing = payload["missing_fields"]
    return [REINDEX_NOTE.format(fields=", ".join(missing))] if missing else []


def tenant_text(payload: dict[str, Any]) -> str:
    lines = [
        f"tenant {payload['tenant']} in {payload['collection']} (index version {payload['index_version']}): "
        f"{payload['documents_total']} documents, {payload['chunks_total']} chunks"
    ]
    for source in payload["sources"]:
        name = source["name"] or "(no recorded source)"
        where = f" ({source['path']})" if source["path"] else ""
        lines.append(f"  source {name}{where}: {source['documents']} documents, {source['chunks']} chunks")
    if payload["documents"]:
        rows = [["DOCUMENT", "SOURCE", "CHUNKS", "YEAR", "TITLE", ""]]
        rows += [
            [d["doc_id"], d["source"], str(d["chunks"]), str(d["year"] or ""), d["title"], _labels(d)]
            for d in payload["documents"]
        ]
        lines += columns(rows)
    return "\n".join(lines + _missing_note(payload))


def index_text(payload: dict[str, Any]) -> str:
    lines = [f"index {payload['collection']} (index version {payload['index_version']})"]
    if payload["tenants"]:
        rows = [["TENANT", "DOCUMENTS", "CHUNKS", "SOURCES"]]
        rows += [
            [t["tenant"], str(t["documents"]), str(t["chunks"]), ", ".join(t["sources"])] for t in payload["tenants"]
        ]
        lines += columns(rows)
    else:
        lines.append("no tenant has documents")
    return "\n".join(lines + _missing_note(payload))
