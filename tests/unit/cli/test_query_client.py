"""`ragc query --filter`: flags become the API's filter object, typed by the config's filter fields."""

from __future__ import annotations

import pytest

from cli.query_client import parse_filters, render
from cluster.config import FilterField, RagcConfig


def test_filters_take_their_types_from_the_config() -> None:
    fields = RagcConfig().serve.filters
    assert parse_filters(["year>=2020", "doc_type=md"], fields) == {"year": {"gte": 2020}, "doc_type": {"eq": "md"}}
    custom = {"pages": FilterField(type="int", ops=["eq", "gte"]), "year": FilterField(type="str")}
    assert parse_filters(["pages=12", "year=2020"], custom) == {"pages": {"eq": 12}, "year": {"eq": "2020"}}


def test_a_malformed_filter_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="bad filter"):
        parse_filters(["year"], RagcConfig().serve.filters)


def test_the_answer_is_printed_with_why_a_stage_fell_back() -> None:
    result = {
        "answer": "Tenants are kept apart by the store [1].",
        "citations": [{"n": 1, "title": "Tenancy", "doc_id": "t.md", "source": "t.md"}],
        "stages": {
            "rewrite": {"status": "skipped", "ms": 0.0, "detail": "not requested"},
            "synthesize": {"status": "fallback", "ms": 12000.0, "detail": "extractive answer: degenerate"},
        },
        "index_version": 3,
    }
    text = render(result)
    assert "synthesize=fallback:12000ms" in text and "  synthesize: extractive answer: degenerate" in text
    assert "not requested" not in text


def test_a_list_field_flag_asks_that_it_holds_each_value() -> None:
    fields = RagcConfig().serve.filters
    assert parse_filters(["tags=ops"], fields) == {"tags": {"contains": "ops"}}
    assert parse_filters(["tags=ops, k8s"], fields) == {"tags": {"contains_all": ["ops", "k8s"]}}
    for bad in ["tags>=a", "tags=", "tags=,"]:
        with pytest.raises(ValueError, match="is a list"):
            parse_filters([bad], fields)
