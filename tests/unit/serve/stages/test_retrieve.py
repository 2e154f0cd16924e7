"""The retrieve stage's arm hits."""

from __future__ import annotations


def test_arm_hits_keep_only_the_arms_a_pipeline_uses() -> None:
    from serve.stages.retrieve import ArmHits

    hits = ArmHits({"dense": [{"id": "a"}], "bm25": [{"id": "b"}]}, {"dense": "ok", "bm25": "ok"}, True, "query")
    assert set(hits.only(dense=True, bm25=False).results) == {"dense"}
    assert hits.only(dense=False, bm25=True).arms == {"bm25": "ok"}
    assert hits.only(dense=True, bm25=True) == hits


def test_a_failed_arm_names_the_grpc_status_rather_than_its_repr() -> None:
    import grpc

    from serve.stages.retrieve import rpc_reason

    class DeadlineError(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.DEADLINE_EXCEEDED

        def details(self) -> str:
            return "Deadline Exceeded"

    assert rpc_reason(DeadlineError()) == "DEADLINE_EXCEEDED: Deadline Exceeded"
    assert rpc_reason(RuntimeError("milvus unreachable")) == "milvus unreachable"


class FieldsOnly:
    """A store client that only describes its collection."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields

    def describe_collection(self, name: str) -> dict:
        return {"fields": [{"name": f} for f in self.fields]}


def test_a_filter_on_a_field_the_serving_collection_lacks_is_the_clients_error() -> None:
    import pytest

    from cluster.config import RagcConfig
    from cluster.store.schema import ChunkFields
    from serve.errors import BadRequestError
    from serve.stages.retrieve import HybridRetriever

    before = [*ChunkFields.OUTPUT, ChunkFields.DENSE, ChunkFields.SPARSE, ChunkFields.BM25_TEXT]
    old = HybridRetriever(RagcConfig())
    old._client = FieldsOnly(before)
    with pytest.raises(BadRequestError, match=r"filter on author, tags: this index was built before .* reindex"):
        old.check_filter_fields('(array_contains(tags, "x")) and (author == "A")')
    old.check_filter_fields('(title == "tags and author")')  # the words of a value are not fields
    old.check_filter_fields("")
    assert old._output_fields() == list(ChunkFields.OUTPUT)
    new = HybridRetriever(RagcConfig())
    new._client = FieldsOnly([*before, *ChunkFields.DECLARED])
    new.check_filter_fields('(array_contains(tags, "x"))')
    assert new._output_fields() == [*ChunkFields.OUTPUT, "author", "tags", "access"]


def test_a_caller_reads_public_documents_and_its_groups_where_the_collection_stores_access() -> None:
    from cluster.config import RagcConfig
    from cluster.store.expr import holds_any_label
    from cluster.store.schema import ChunkFields
    from serve.stages.retrieve import HybridRetriever

    retriever = HybridRetriever(RagcConfig())
    retriever._client = FieldsOnly([*ChunkFields.OUTPUT, *ChunkFields.DOCUMENT_FIELDS])
    assert retriever.access_expr(()) == holds_any_label("access_terms", ["*"])
    assert retriever.access_expr(("hr", "ops")) == holds_any_label("access_terms", ["*", "hr", "ops"])
    between = HybridRetriever(RagcConfig())  # created after access groups were stored, before their terms
    between._client = FieldsOnly([*ChunkFields.OUTPUT, *ChunkFields.DECLARED])
    assert between.access_expr(()) == 'array_contains_any(access, ["*"])'
    assert between.access_expr(("hr", "ops")) == 'array_contains_any(access, ["*", "hr", "ops"])'
    older = HybridRetriever(RagcConfig())  # nothing in it is restricted: the ingest refuses such documents there
    older._client = FieldsOnly(list(ChunkFields.OUTPUT))
    assert older.access_expr(("hr",)) == ""
    unknown = HybridRetriever(RagcConfig())  # no client: the clause stays (a failed search, never a wider one)
    assert unknown.access_expr(()) == 'array_contains_any(access, ["*"])'


def test_a_request_filters_on_the_tags_terms_where_the_collection_stores_them() -> None:
    from cluster.config import RagcConfig
    from cluster.store.expr import holds_any_label
    from cluster.store.schema import ChunkFields
    from serve.edge.filters import compile_filters
    from serve.stages.retrieve import HybridRetriever

    cfg = RagcConfig()
    tagged = compile_filters({"tags": "ops", "year": {"gte": 2020}}, cfg.serve.filters, cfg.serve.limits)
    current = HybridRetriever(cfg)
    current._client = FieldsOnly([*ChunkFields.OUTPUT, *ChunkFields.DOCUMENT_FIELDS])
    scoped, access = current.scoped(tagged, ("hr",))
    assert access == holds_any_label("access_terms", ["*", "hr"])
    assert scoped == f"((({holds_any_label('tags_terms', ['ops'])})) and (year >= 2020)) and ({access})"
    between = HybridRetriever(cfg)  # tags and access stored, not yet their terms: the ARRAY clauses
    between._client = FieldsOnly([*ChunkFields.OUTPUT, *ChunkFields.DECLARED])
    assert between.scoped(tagged, ())[0] == f'({tagged}) and (array_contains_any(access, ["*"]))'


def test_a_search_that_raced_a_reindex_into_a_collection_with_access_groups_is_run_again_with_them() -> None:
    """After a search without the access clause the serving collection's fields are read afresh: if they have
    `access` by then (a reindex moved the alias mid-request), the search runs again with the groups' clause."""
    from cluster.config import RagcConfig
    from cluster.store.expr import holds_any_label
    from cluster.store.schema import ChunkFields
    from serve.stages.retrieve import ArmHits, HybridRetriever
    from serve.types import RetrievalResult

    retriever = HybridRetriever(RagcConfig(), embedder=object())  # type: ignore[arg-type]
    client = retriever._client = FieldsOnly(list(ChunkFields.OUTPUT))
    searched: list[str] = []

    def search_arms(tenant: str, query: str, expr: str = "", hyde: str | None = None) -> ArmHits:
        searched.append(expr)
        client.fields = [*ChunkFields.OUTPUT, *ChunkFields.DOCUMENT_FIELDS]  # the reindex's alias swap lands meanwhile
        return ArmHits({"dense": []}, {"dense": "ok"}, True, "query")

    retriever.search_arms = search_arms  # type: ignore[method-assign]
    retriever.fuse = lambda hits: RetrievalResult([], index_version=1)  # type: ignore[method-assign]
    retriever.retrieve("t", "q", groups=("hr",))
    assert searched == ["", holds_any_label("access_terms", ["*", "hr"])]
