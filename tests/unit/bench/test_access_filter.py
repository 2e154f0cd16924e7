"""`ragc bench access` times the clauses the retriever sends, not look-alikes."""

from tests.unit.serve.stages.test_retrieve import FieldsOnly


def test_the_bench_times_the_clauses_the_retriever_sends_to_each_kind_of_collection() -> None:
    from bench.access_filter import KEY_GROUPS, clauses
    from cluster.config import RagcConfig
    from cluster.store.schema import ChunkFields
    from serve.stages.retrieve import HybridRetriever

    timed = clauses()
    current = HybridRetriever(RagcConfig())
    current._client = FieldsOnly([*ChunkFields.OUTPUT, *ChunkFields.DOCUMENT_FIELDS])
    before_terms = HybridRetriever(RagcConfig())
    before_terms._client = FieldsOnly([*ChunkFields.OUTPUT, *ChunkFields.DECLARED])
    assert timed["terms, key without groups"] == current.access_expr(())
    assert timed["terms, key with 3 groups"] == current.access_expr(KEY_GROUPS)
    assert timed["array, key without groups"] == before_terms.access_expr(())
    assert timed["array, key with 3 groups"] == before_terms.access_expr(KEY_GROUPS)
    assert next(iter(timed.items())) == ("none (baseline)", "")
    assert timed["tag filter, array"] == '(array_contains(tags, "hr"))', "what a request's `tags` filter compiles to"
    scoped, _ = current.scoped(timed["tag filter, array"], ())
    assert scoped.startswith(f"({timed['tag filter, terms']}) and "), "and what the retriever sends for it"
