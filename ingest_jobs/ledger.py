"""The ingestion ledger: (tenant, doc_id) -> content hash and chunk ids, in a Milvus collection beside
the chunk collection it describes, so every worker and every re-run sees the same record.

An entry is written only after the document's chunks have landed, so a crashed run leaves the
document looking new or changed, and the next run redoes it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pymilvus import MilvusClient

from cluster.hashing import sha
from cluster.store.client import iterate_rows
from cluster.store.expr import all_of, eq, is_in
from cluster.store.schema import LEDGER_CHUNK_IDS_MAX, PLACEHOLDER_VECTOR


@dataclass(frozen=True)
class LedgerEntry:
    doc_id: str
    content_hash: str
    chunk_ids: tuple[str, ...]


def ledger_key(tenant: str, doc_id: str) -> str:
    return sha(f"{tenant}\x00{doc_id}")


class Ledger:
    def __init__(self, client: MilvusClient, collection: str) -> None:
        self._client = client
        self._collection = collection

    def entries(self, tenant: str) -> dict[str, LedgerEntry]:
        rows = iterate_rows(
            self._client, self._collection, eq("tenant_id", tenant), ["doc_id", "content_hash", "chunk_ids"]
        )
        return {
            row["doc_id"]: LedgerEntry(row["doc_id"], row["content_hash"], _decode_ids(row["chunk_ids"]))
            for row in rows
        }

    def record(self, tenant: str, entries: list[LedgerEntry]) -> None:
        rows = [
            {
                "key": ledger_key(tenant, e.doc_id),
                "tenant_id": tenant,
                "doc_id": e.doc_id,
                "content_hash": e.content_hash,
                "chunk_ids": _encode_ids(e.chunk_ids),
                "_v": PLACEHOLDER_VECTOR,
            }
            for e in entries
        ]
        if rows:
            self._client.upsert(self._collection, rows)

    def forget(self, tenant: str, doc_ids: list[str]) -> None:
        if doc_ids:
            self._client.delete(self._collection, filter=all_of(eq("tenant_id", tenant), is_in("doc_id", doc_ids)))


def _encode_ids(ids: tuple[str, ...]) -> str:
    """The id list when it fits the field; a document with thousands of chunks keeps only its count
    (stale chunks are found by doc_id filter, so the list is informational)."""
    encoded = json.dumps(list(ids))
    return encoded if len(encoded) <= LEDGER_CHUNK_IDS_MAX else json.dumps({"count": len(ids)})


def _decode_ids(raw: str) -> tuple[str, ...]:
    value = json.loads(raw)
    return tuple(value) if isinstance(value, list) else ()
