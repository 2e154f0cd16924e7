"""Milvus schemas shared by ingestion and serving.

Field names follow llama-index's `MilvusVectorStore` defaults (`id`, `doc_id`, `text`, `embedding`,
`sparse_embedding`) so its retrievers can attach to the same collection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymilvus import DataType, Function, FunctionType, MilvusClient

from cluster.config import ChunkingConfig, EmbeddingConfig, MilvusConfig
from cluster.labels import LABEL_MAX, LABELS_MAX, TERMS_MAX
from cluster.store.bm25_text import bm25_scheme, scheme_enrichment
from cluster.weights import weights_fingerprint

ID_MAX = 64
DOC_ID_MAX = 1024
TENANT_MAX = 128
SHORT_TEXT_MAX = 2048
AUTHOR_MAX = 512


def fit_bytes(text: str, max_bytes: int) -> str:
    """`text` cut to at most `max_bytes` UTF-8 bytes, never inside a character: what a VARCHAR field of
    `max_length` takes whether the store counts characters or bytes."""
    data = text.encode("utf-8")
    return text if len(data) <= max_bytes else data[:max_bytes].decode("utf-8", "ignore")


PLACEHOLDER_DIM = 2  # Milvus wants a vector field in every collection; key-value collections carry a dummy one

# Collection properties that pin what the vectors mean.
PROP_MODEL_ID = "ragc.embedding_model_id"
PROP_DIM = "ragc.embedding_dim"
PROP_WEIGHTS = "ragc.embedding_weights"  # cluster/weights.py; absent on collections from before it
PROP_CHUNKER = "ragc.chunker"
PROP_BM25 = "ragc.bm25_text"
PROP_DENSE_TEXT = "ragc.dense_text"  # absent: the bare chunk text ({text})
PLAIN_DENSE_TEXT = "{text}"
LEGACY_BM25 = "analyzer-only"  # collections from before the stemmed BM25 field: BM25 over `text` itself


class ChunkFields:
    ID = "id"
    DOC_ID = "doc_id"
    TENANT = "tenant_id"
    TEXT = "text"
    BM25_TEXT = "bm25_text"  # the stemmed copy the BM25 function reads (cluster/store/bm25_text.py)
    SPARSE = "sparse_embedding"
    DENSE = "embedding"
    SOURCE = "source"
    TITLE = "title"
    DOC_TYPE = "doc_type"
    SECTION = "section"
    YEAR = "year"
    UPDATED_AT = "updated_at"
    CHUNK_INDEX = "chunk_index"
    CONTENT_HASH = "content_hash"
    AUTHOR = "author"
    TAGS = "tags"
    ACCESS = "access"  # the groups whose keys may read the document (cluster/labels.py: PUBLIC for every key)
    # `tags` and `access` as cluster.labels.label_terms writes them: what the tag and access filters match
    TAGS_TERMS = "tags_terms"
    ACCESS_TERMS = "access_terms"

    METADATA = (SOURCE, TITLE, DOC_TYPE, SECTION, YEAR, UPDATED_AT, CHUNK_INDEX, CONTENT_HASH)
    OUTPUT = (ID, DOC_ID, TENANT, TEXT, *METADATA)
    # the declared document fields, in collections created since they were stored (none before): who reads or
    # writes them asks the collection first (`stored_fields`)
    DECLARED = (AUTHOR, TAGS, ACCESS)
    # written beside a declared field for filters only, never read back; in collections created since then
    FILTER_TERMS = (TAGS_TERMS, ACCESS_TERMS)
    LABEL_TERMS = {TAGS: TAGS_TERMS, ACCESS: ACCESS_TERMS}
    DOCUMENT_FIELDS = (*DECLARED, *FILTER_TERMS)


LABELS_FIELD = {
    "datatype": DataType.ARRAY,
    "element_type": DataType.VARCHAR,
    "max_capacity": LABELS_MAX,
    "max_length": LABEL_MAX,
}
DECLARED_FIELD_TYPES: dict[str, dict[str, Any]] = {
    ChunkFields.AUTHOR: {"datatype": DataType.VARCHAR, "max_length": AUTHOR_MAX},
    ChunkFields.TAGS: LABELS_FIELD,
    ChunkFields.ACCESS: LABELS_FIELD,
}


def stored_fields(client: MilvusClient, name: str) -> frozenset[str]:
    """The field names of a collection (or of the one an alias points at)."""
    return frozenset(str(f["name"]) for f in client.describe_collection(name)["fields"])


def declared_fields(client: MilvusClient, name: str) -> tuple[str, ...]:
    """The declared document fields and filter terms a collection has: none in one created before them."""
    fields = stored_fields(client, name)
    return tuple(f for f in ChunkFields.DOCUMENT_FIELDS if f in fields)


@dataclass(frozen=True)
class CollectionIdentity:
    """What a collection's vectors and chunks were made with."""

    model_id: str
    dim: int
    chunker: str
    bm25: str
    weights: str = ""  # fingerprint of the embedding model's files; "" = unknown (not checked)
    dense_text: str = PLAIN_DENSE_TEXT  # the template of what was embedded per chunk

    @classmethod
    def from_config(
        cls, embedding: EmbeddingConfig, chunking: ChunkingConfig, milvus: MilvusConfig, enrichment: str = ""
    ) -> CollectionIdentity:
        """`enrichment`: what writes the chunks' questions (`RagcConfig.enrichment_fingerprint`)."""
        return cls(
            embedding.model_id,
            embedding.dim,
            chunking.fingerprint(),
            bm25_scheme(milvus.bm25_stemmer, enrichment),
            weights_fingerprint(embedding.model),
            embedding.passage_template,
        )

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> CollectionIdentity | None:
        if PROP_MODEL_ID not in props:
            return None
        return cls(
            model_id=str(props[PROP_MODEL_ID]),
            dim=int(props[PROP_DIM]),
            chunker=str(props[PROP_CHUNKER]),
            bm25=str(props.get(PROP_BM25, LEGACY_BM25)),
            weights=str(props.get(PROP_WEIGHTS, "")),
            dense_text=str(props.get(PROP_DENSE_TEXT, PLAIN_DENSE_TEXT)),
        )

    @property
    def enrichment(self) -> str:
        """What wrote its chunks' questions and summaries ("" = none)."""
        return scheme_enrichment(self.bm25)

    def same_weights(self, other: CollectionIdentity) -> bool:
        """Same model id and width, and the same weight files wherever both sides know theirs."""
        known = self.weights and other.weights
        return (self.model_id, self.dim) == (other.model_id, other.dim) and (not known or self.weights == other.weights)

    def properties(self) -> dict[str, str]:
        props = {
            PROP_MODEL_ID: self.model_id,
            PROP_DIM: str(self.dim),
            PROP_CHUNKER: self.chunker,
            PROP_BM25: self.bm25,
        }
        props |= {PROP_WEIGHTS: self.weights} if self.weights else {}
        return props | ({PROP_DENSE_TEXT: self.dense_text} if self.dense_text != PLAIN_DENSE_TEXT else {})


def create_chunk_collection(client: MilvusClient, name: str, identity: CollectionIdentity, cfg: MilvusConfig) -> None:
    f = ChunkFields
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False, description="ragc chunks")
    schema.add_field(f.ID, DataType.VARCHAR, is_primary=True, max_length=ID_MAX)
    schema.add_field(f.DOC_ID, DataType.VARCHAR, max_length=DOC_ID_MAX)
    schema.add_field(f.TENANT, DataType.VARCHAR, max_length=TENANT_MAX, is_partition_key=True)
    schema.add_field(f.TEXT, DataType.VARCHAR, max_length=cfg.text_max_chars)
    schema.add_field(
        f.BM25_TEXT,
        DataType.VARCHAR,
        max_length=cfg.text_max_chars,
        enable_analyzer=True,
        analyzer_params=cfg.bm25_analyzer,
    )
    schema.add_field(f.SPARSE, DataType.SPARSE_FLOAT_VECTOR)
    schema.add_field(f.DENSE, DataType.FLOAT_VECTOR, dim=identity.dim)
    schema.add_field(f.SOURCE, DataType.VARCHAR, max_length=SHORT_TEXT_MAX)
    schema.add_field(f.TITLE, DataType.VARCHAR, max_length=SHORT_TEXT_MAX)
    schema.add_field(f.DOC_TYPE, DataType.VARCHAR, max_length=16)
    schema.add_field(f.SECTION, DataType.VARCHAR, max_length=SHORT_TEXT_MAX)
    schema.add_field(f.YEAR, DataType.INT64)
    schema.add_field(f.UPDATED_AT, DataType.INT64)
    schema.add_field(f.CHUNK_INDEX, DataType.INT64)
    schema.add_field(f.CONTENT_HASH, DataType.VARCHAR, max_length=ID_MAX)
    for declared in f.DECLARED:
        schema.add_field(declared, **DECLARED_FIELD_TYPES[declared])
    for terms in f.FILTER_TERMS:
        schema.add_field(terms, DataType.VARCHAR, max_length=TERMS_MAX)
    schema.add_function(
        Function(
            name="text_bm25",
            function_type=FunctionType.BM25,
            input_field_names=[f.BM25_TEXT],
            output_field_names=[f.SPARSE],
        )
    )
    index = client.prepare_index_params()
    index.add_index(
        f.DENSE,
        index_type="HNSW",
        metric_type="COSINE",
        params={"M": cfg.hnsw_m, "efConstruction": cfg.hnsw_ef_construction},
    )
    index.add_index(f.SPARSE, index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection(name, schema=schema, index_params=index, properties=identity.properties())


def create_key_value_collection(client: MilvusClient, name: str, fields: dict[str, int]) -> None:
    """A collection used as a table: VARCHAR primary `key`, the given VARCHAR fields, a dummy vector."""
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("key", DataType.VARCHAR, is_primary=True, max_length=ID_MAX * 4)
    for field, max_length in fields.items():
        schema.add_field(field, DataType.VARCHAR, max_length=max_length)
    schema.add_field("_v", DataType.FLOAT_VECTOR, dim=PLACEHOLDER_DIM)
    index = client.prepare_index_params()
    index.add_index("_v", index_type="FLAT", metric_type="L2")
    client.create_collection(name, schema=schema, index_params=index)


PLACEHOLDER_VECTOR = [0.0] * PLACEHOLDER_DIM
LEDGER_CHUNK_IDS_MAX = 65535


def create_ledger_collection(client: MilvusClient, name: str) -> None:
    """(tenant, doc_id) -> content hash and chunk ids; see ingest_jobs/ledger.py."""
    create_key_value_collection(
        client,
        name,
        {"tenant_id": TENANT_MAX, "doc_id": DOC_ID_MAX, "content_hash": ID_MAX, "chunk_ids": LEDGER_CHUNK_IDS_MAX},
    )
