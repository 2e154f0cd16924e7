"""Connections to Milvus and the small key-value catalog (index versions, recorded sources)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from pymilvus import MilvusClient, MilvusException
from pymilvus.client.types import Status
from tenacity import Retrying, before_sleep_log, retry_if_exception, stop_after_attempt, wait_exponential

from cluster.config import RagcConfig
from cluster.store.expr import eq, is_in
from cluster.store.schema import PLACEHOLDER_VECTOR, create_key_value_collection

VALUE_MAX = 65535


def milvus_uri(cfg: RagcConfig) -> str:
    """The configured Milvus, else the local milvus-lite sidecar (always by URI, never the .db file)."""
    return cfg.milvus.uri or f"http://{cfg.local.host}:{cfg.local.milvus_port}"


ITERATOR_BATCH = 4096


def _not_the_iterator_ts_warning(record: logging.LogRecord) -> bool:
    """milvus-lite answers no mvccTs to the query an iterator starts with; pymilvus then warns (on every
    `ragc` command that lists rows) and uses the client's clock instead, which is what a full read needs."""
    return not record.getMessage().startswith("failed to get mvccTs from milvus server")


logging.getLogger("pymilvus.orm.iterator").addFilter(_not_the_iterator_ts_warning)


def first_rows(client: MilvusClient, collection: str, expr: str, fields: list[str], limit: int) -> list[dict[str, Any]]:
    """The `limit` rows matching `expr` with the smallest primary keys, in key order: a page that `pk > last`
    continues. A plain query's rows come in no order (milvus-lite 3.2.2); the iterator's come by key."""
    iterator = client.query_iterator(collection, batch_size=limit, filter=expr, output_fields=fields)
    try:
        return list(iterator.next())
    finally:
        iterator.close()


def iterate_rows(client: MilvusClient, collection: str, expr: str, fields: list[str]) -> Iterator[dict[str, Any]]:
    """Every row matching `expr`, in batches (a plain query is capped at 16,384 rows)."""
    iterator = client.query_iterator(collection, batch_size=ITERATOR_BATCH, filter=expr, output_fields=fields)
    try:
        while batch := iterator.next():
            yield from batch
    finally:
        iterator.close()


logger = logging.getLogger(__name__)


def connection_failed(exc: BaseException) -> bool:
    """The server did not answer the handshake (down, or too busy within the timeout); not a refused login."""
    return isinstance(exc, MilvusException) and exc.code == Status.CONNECT_FAILED


def connect(cfg: RagcConfig, attempts: int | None = None) -> MilvusClient:
    """`attempts` (default `milvus.connect_attempts`) in all while the handshake fails, 1, 2, 4 s apart: a
    batch job waits out a store that is busy for a moment (a milvus-lite starved of CPU beside other work
    missed the 10 s handshake and failed a whole ingest); the service passes 1 and reports itself unready."""
    token = cfg.milvus.token.resolve() or ""
    grpc_options = {"grpc.keepalive_permit_without_calls": int(cfg.milvus.keepalive_without_calls)}
    retrying = Retrying(
        retry=retry_if_exception(connection_failed),
        stop=stop_after_attempt(attempts or cfg.milvus.connect_attempts),
        wait=wait_exponential(multiplier=1, max=4),
        before_sleep=before_sleep_log(logger, logging.WARNING),
        reraise=True,
    )
    return retrying(
        MilvusClient,
        uri=milvus_uri(cfg),
        token=token,
        db_name=cfg.milvus.db_name,
        timeout=cfg.milvus.connect_timeout_s,
        grpc_options=grpc_options,
    )


NOT_LOADED = 101  # MilvusException code: "collection ... is in state 'released'; call load() before search"


class Catalog:
    """JSON values by string key in a small Milvus collection, shared by every process."""

    def __init__(self, client: MilvusClient, name: str) -> None:
        self._client = client
        self._name = name
        if not client.has_collection(name):
            create_key_value_collection(client, name, {"value": VALUE_MAX})
        self.load()

    def load(self) -> None:
        """Loaded for reading: once, and again after the store restarted (it comes back with nothing loaded)."""
        self._client.load_collection(self._name)

    def get(self, key: str) -> Any:
        rows = self._query(filter=eq("key", key), output_fields=["value"])
        return json.loads(rows[0]["value"]) if rows else None

    def get_many(self, prefix: str) -> dict[str, Any]:
        rows = self._query(filter=f'key like "{prefix}%"', output_fields=["key", "value"], limit=16384)
        return {r["key"]: json.loads(r["value"]) for r in rows}

    def _query(self, **query: Any) -> list[dict[str, Any]]:
        """A read that loads the catalog again if the store restarted under this client (it comes back with
        nothing loaded, and the index version is read on every answer)."""
        try:
            return list(self._client.query(self._name, **query))
        except MilvusException as exc:
            if exc.code != NOT_LOADED:
                raise
        self.load()
        return list(self._client.query(self._name, **query))

    def put(self, key: str, value: Any) -> None:
        self._client.upsert(self._name, [{"key": key, "value": json.dumps(value), "_v": PLACEHOLDER_VECTOR}])

    def delete(self, keys: list[str]) -> None:
        if keys:
            self._client.delete(self._name, filter=is_in("key", keys))

    def bump(self, key: str) -> int:
        """Increment an integer. Ingest jobs of one collection are serialised by the caller."""
        value = int(self.get(key) or 0) + 1
        self.put(key, value)
        return value
