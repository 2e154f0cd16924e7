"""Versioned physical collections behind one alias, with their identity and index version."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from cluster.config import RagcConfig
from cluster.store.client import Catalog
from cluster.store.schema import CollectionIdentity, create_chunk_collection, create_ledger_collection

LEDGER_SUFFIX = "_ledger"


class CollectionMismatchError(RuntimeError):
    """The collection was built with another embedding model or chunker than the config names."""


def ledger_name(physical: str) -> str:
    return physical + LEDGER_SUFFIX


def physical_name(alias: str, generation: int) -> str:
    return f"{alias}_v{generation}"


def generation_of(alias: str, physical: str) -> int:
    match = re.fullmatch(re.escape(alias) + r"_v(\d+)", physical)
    return int(match.group(1)) if match else 0


@dataclass(frozen=True)
class ActiveCollection:
    alias: str
    physical: str
    identity: CollectionIdentity


class Collections:
    """Which physical collection an alias points at, what it holds, and its index version."""

    def __init__(self, client: MilvusClient, cfg: RagcConfig) -> None:
        self.client = client
        self.alias = cfg.milvus.collection
        self.catalog = Catalog(client, cfg.milvus.meta_collection)
        self._cfg = cfg

    def wanted_identity(self) -> CollectionIdentity:
        cfg = self._cfg
        return CollectionIdentity.from_config(cfg.embedding, cfg.chunking, cfg.milvus, cfg.enrichment_fingerprint())

    def resolve(self) -> str | None:
        pymilvus_logger = logging.getLogger("pymilvus")
        level = pymilvus_logger.level
        pymilvus_logger.setLevel(logging.CRITICAL)  # a missing alias is an answer here, not an error to log
        try:
            return str(self.client.describe_alias(self.alias)["collection_name"])
        except MilvusException:
            return None
        finally:
            pymilvus_logger.setLevel(level)

    def identity_of(self, physical: str) -> CollectionIdentity | None:
        props = self.client.describe_collection(physical).get("properties", {})
        return CollectionIdentity.from_properties(props)

    def active(self) -> ActiveCollection | None:
        physical = self.resolve()
        if physical is None:
            return None
        identity = self.identity_of(physical)
        if identity is None:
            raise CollectionMismatchError(f"collection {physical!r} records no embedding model: not a ragc index")
        return ActiveCollection(self.alias, physical, identity)

    def check(self, active: ActiveCollection) -> None:
        wanted = self.wanted_identity()
        if active.identity.model_id != wanted.model_id or active.identity.dim != wanted.dim:
            raise CollectionMismatchError(
                f"collection {active.physical!r} was embedded with {active.identity.model_id} "
                f"({active.identity.dim}-d) but the config names {wanted.model_id} ({wanted.dim}-d); "
                "run `ragc reindex` to rebuild it with the new model"
            )
        if not active.identity.same_weights(wanted):
            raise CollectionMismatchError(
                f"collection {active.physical!r} was embedded with {active.identity.model_id} weights "
                f"{active.identity.weights} but the configured model ({self._cfg.embedding.model}) has weights "
                f"{wanted.weights} under the same id; vectors of two models must not mix: run `ragc reindex`"
            )
        if active.identity.chunker != wanted.chunker:
            raise CollectionMismatchError(
                f"collection {active.physical!r} was chunked as {active.identity.chunker} but the config "
                f"says {wanted.chunker}; run `ragc reindex` to rebuild it"
            )
        if active.identity.dense_text != wanted.dense_text:
            raise CollectionMismatchError(
                f"collection {active.physical!r} embedded chunks as {active.identity.dense_text!r} but the config "
                f"says {wanted.dense_text!r} (embedding.passage_template); run `ragc reindex` to rebuild it"
            )
        if active.identity.bm25 != wanted.bm25:
            raise CollectionMismatchError(
                f"collection {active.physical!r} indexes BM25 text as {active.identity.bm25} but the config "
                f"says {wanted.bm25}; run `ragc reindex` to rebuild it"
            )

    def ensure(self) -> ActiveCollection:
        """The active collection, created (generation 1) when the alias does not exist yet."""
        active = self.active()
        if active is None:
            physical = physical_name(self.alias, 1)
            self.create_physical(physical)
            self.client.create_alias(physical, self.alias)
            active = ActiveCollection(self.alias, physical, self.wanted_identity())
        self.check(active)
        self.load(active.physical)
        return active

    def create_physical(self, physical: str) -> None:
        if self.client.has_collection(physical):
            self.client.drop_collection(physical)
        if self.client.has_collection(ledger_name(physical)):
            self.client.drop_collection(ledger_name(physical))
        create_chunk_collection(self.client, physical, self.wanted_identity(), self._cfg.milvus)
        create_ledger_collection(self.client, ledger_name(physical))

    def load(self, physical: str) -> None:
        """The collection and its ledger, and the catalog (the index version): what a store that restarted
        lost; the service's readiness and health checks call this through `ensure`."""
        self.client.load_collection(physical)
        self.client.load_collection(ledger_name(physical))
        self.catalog.load()

    def swap_alias(self, physical: str) -> str | None:
        """Point the alias at `physical`; returns the collection it pointed at before."""
        previous = self.resolve()
        if previous is None:
            self.client.create_alias(physical, self.alias)
        else:
            self.client.alter_alias(physical, self.alias)
        return previous

    def release(self, physical: str) -> None:
        for name in (physical, ledger_name(physical)):
            if self.client.has_collection(name):
                self.client.release_collection(name)

    def generations(self) -> list[str]:
        names = [n for n in self.client.list_collections() if generation_of(self.alias, n)]
        return sorted(names, key=lambda n: generation_of(self.alias, n))

    def drop_physical(self, physical: str) -> None:
        for name in (physical, ledger_name(physical)):
            if self.client.has_collection(name):
                self.client.drop_collection(name)

    # The index version changes whenever the searchable content changes; caches key on it.
    def version_key(self) -> str:
        return f"index_version:{self.alias}"

    def index_version(self) -> int:
        return int(self.catalog.get(self.version_key()) or 0)

    def bump_index_version(self) -> int:
        return self.catalog.bump(self.version_key())
