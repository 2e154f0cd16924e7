"""The HTTP edge: filters compile to escaped store clauses; API keys map to tenants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.config import AuthConfig, LimitsConfig, RagcConfig, SecretRef
from serve.edge.auth import Authenticator
from serve.edge.filters import compile_filters
from serve.errors import BadRequestError, UnauthorizedError

ALLOWED = RagcConfig().serve.filters
LIMITS = LimitsConfig()


def test_filters_compile_to_escaped_typed_clauses() -> None:
    expr = compile_filters(
        {"doc_type": "md", "year": {"gte": 2019, "lte": 2021}, "source": {"in": ["a", "b"]}}, ALLOWED, LIMITS
    )
    assert expr == '(doc_type == "md") and (year >= 2019) and (year <= 2021) and (source in ["a", "b"])'
    assert compile_filters({}, ALLOWED, LIMITS) == ""


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"doc_type": '" or 1==1 or "'}, "quotes"),
        ({"doc_type": "md' or '1'=='1"}, "quotes"),
        ({"tenant_id": "other"}, "unknown filter field"),
        ({"year or 1==1": 1}, "unknown filter field"),
        ({"year": "2020 or 1==1"}, "takes an integer"),
        ({"year": True}, "takes an integer"),
        ({"doc_type": 5}, "takes a string"),
        ({"doc_type": {"gte": "a"}}, "not allowed"),
        ({"doc_type": {"like": "a%"}}, "not allowed"),
        ({"source": {"in": []}}, "non-empty list"),
        ({"doc_type": "a\nb"}, "control characters"),
        ({"doc_type": "md\ud800"}, "unpaired surrogate"),  # JSON's "\ud800": no UTF-8 encoder takes it
    ],
)
def test_filters_refuse_injection_unknown_fields_and_wrong_types(filters: dict, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        compile_filters(filters, ALLOWED, LIMITS)


def test_auth_maps_keys_to_tenants(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEYS", '{"k-a": "alpha", "k-b": "beta"}')
    auth = Authenticator(AuthConfig(api_keys=SecretRef(env_var="TEST_KEYS")), "0.0.0.0")
    assert auth.tenant_for("Bearer k-a", None) == "alpha"
    assert auth.tenant_for(None, "k-b") == "beta"
    with pytest.raises(UnauthorizedError, match="missing"):
        auth.tenant_for(None, None)
    with pytest.raises(UnauthorizedError, match="unknown"):
        auth.tenant_for("Bearer nope", None)


def test_a_key_may_carry_access_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.edge.auth import Caller

    keys = {"k-a": "alpha", "k-hr": {"tenant": "alpha", "groups": ["hr", " hr", "ops"]}}
    monkeypatch.setenv("TEST_KEYS", json.dumps(keys))
    auth = Authenticator(AuthConfig(api_keys=SecretRef(env_var="TEST_KEYS")), "0.0.0.0")
    assert auth.caller_for("Bearer k-a", None) == Caller("alpha", ())
    assert auth.caller_for(None, "k-hr") == Caller("alpha", ("hr", "ops"))
    for wrong, message in [
        ({"tenant": "alpha", "group": ["hr"]}, "tenant or to"),
        ({"groups": ["hr"]}, "tenant or to"),
        ({"tenant": "alpha", "groups": "hr"}, "list of strings"),
        ({"tenant": "alpha", "groups": ['h"r']}, "quote"),
    ]:
        monkeypatch.setenv("TEST_KEYS", json.dumps({"k": wrong}))
        with pytest.raises(ValueError, match=message):
            Authenticator(AuthConfig(api_keys=SecretRef(env_var="TEST_KEYS")), "0.0.0.0")


def test_keys_are_read_again_so_a_rotated_or_revoked_key_needs_no_restart(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k-old": "alpha"}))
    now = [0.0]
    auth = Authenticator(AuthConfig(api_keys=SecretRef(file=keys), reload_s=10), "0.0.0.0", clock=lambda: now[0])
    assert auth.tenant_for("Bearer k-old", None) == "alpha"

    keys.write_text(json.dumps({"k-new": "alpha", "k-b": {"tenant": "beta", "groups": ["hr"]}}))  # rotated
    now[0] = 9.0
    assert auth.tenant_for("Bearer k-old", None) == "alpha", "read again only every reload_s"
    now[0] = 10.0
    with pytest.raises(UnauthorizedError, match="unknown"):
        auth.tenant_for("Bearer k-old", None)
    assert auth.caller_for("Bearer k-b", None).groups == ("hr",) and auth.tenant_for(None, "k-new") == "alpha"

    for broken in ('{"k-new": ', json.dumps({"k": {"groups": ["hr"]}}), None):  # a bad edit, or the file gone
        if broken is None:
            keys.unlink()
        else:
            keys.write_text(broken)
        now[0] += 10.0
        assert auth.tenant_for(None, "k-new") == "alpha", f"{broken!r} keeps the keys in use"

    keys.write_text("{}")  # an empty mapping is valid: every key revoked
    now[0] += 10.0
    with pytest.raises(UnauthorizedError, match="unknown"):
        auth.tenant_for(None, "k-new")


def test_reload_off_reads_the_keys_once(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k": "alpha"}))
    now = [0.0]
    auth = Authenticator(AuthConfig(api_keys=SecretRef(file=keys), reload_s=0), "0.0.0.0", clock=lambda: now[0])
    keys.write_text("{}")
    now[0] = 1e6
    assert auth.tenant_for(None, "k") == "alpha"


def test_auth_off_is_single_tenant_and_loopback_only() -> None:
    off = AuthConfig(enabled=False, single_tenant="demo")
    assert Authenticator(off, "127.0.0.1").tenant_for(None, None) == "demo"
    with pytest.raises(ValueError, match="non-loopback"):
        Authenticator(off, "0.0.0.0")


def test_list_filters_compile_to_array_functions_and_refuse_what_does_not_apply() -> None:
    expr = compile_filters({"tags": "ops", "author": {"in": ["Ann"]}}, ALLOWED, LIMITS)
    assert expr == '(array_contains(tags, "ops")) and (author in ["Ann"])'
    both = compile_filters({"tags": {"contains_any": ["a", "b"], "contains_all": ["c"]}}, ALLOWED, LIMITS)
    assert both == '(array_contains_any(tags, ["a", "b"])) and (array_contains_all(tags, ["c"]))'
    for filters, message in [
        ({"tags": {"eq": "ops"}}, "not allowed on 'tags'"),
        ({"tags": {"contains_any": "ops"}}, "non-empty list"),
        ({"tags": {"contains_all": ["a", 1]}}, "takes a string"),
        ({"tags": {"contains": 'x") or true or ("'}}, "quotes"),
        ({"tags": {"contains_any": ["x"] * (LIMITS.max_in_values + 1)}}, "more than"),
        ({"author": {"contains": "Ann"}}, "not allowed on 'author'"),
    ]:
        with pytest.raises(BadRequestError, match=message):
            compile_filters(filters, ALLOWED, LIMITS)


def test_a_filter_field_takes_the_operators_of_its_type() -> None:
    from cluster.config import FilterField

    assert FilterField(type="str_list").ops == ["contains", "contains_any", "contains_all"]
    assert FilterField().ops == ["eq", "ne", "in"]
    for wrong in [{"type": "str_list", "ops": ["eq"]}, {"type": "str", "ops": ["contains"]}]:
        with pytest.raises(ValueError, match="do not apply"):
            FilterField.model_validate(wrong)


def test_list_filters_match_the_fields_terms_where_the_collection_stores_them() -> None:
    from cluster.store.expr import holds_any_label
    from serve.edge.filters import on_label_terms

    terms = {"tags": "tags_terms"}
    expr = compile_filters({"tags": "ops", "author": {"in": ["Ann"]}}, ALLOWED, LIMITS)
    assert on_label_terms(expr, terms) == f'(({holds_any_label("tags_terms", ["ops"])})) and (author in ["Ann"])'
    assert on_label_terms(expr, {}) == expr, "a collection without the terms keeps the ARRAY clause"
    both = compile_filters({"tags": {"contains_any": ["a", "b"], "contains_all": ["c", "ü d"]}}, ALLOWED, LIMITS)
    any_of, all_of = holds_any_label("tags_terms", ["a", "b"]), [holds_any_label("tags_terms", [v]) for v in "c"]
    all_of.append(holds_any_label("tags_terms", ["ü d"]))
    assert on_label_terms(both, terms) == f"(({any_of})) and ((({all_of[0]}) and ({all_of[1]})))"


def test_a_value_that_spells_a_list_clause_stays_a_value() -> None:
    """The scan reads each string literal whole, so no clause is read from a value or across two of them: here
    `array_contains(tags, ` then the literal `") and (author == "` then `)` would look like one."""
    from serve.edge.filters import on_label_terms

    filters = {"title": "array_contains(tags, ", "author": ")", "tags": {"contains_any": ["a"]}}
    expr = compile_filters(filters, ALLOWED, LIMITS)
    assert expr.startswith('(title == "array_contains(tags, ") and (author == ")") and (array_contains_any(tags')
    rewritten = on_label_terms(expr, {"tags": "tags_terms"})
    assert rewritten.startswith('(title == "array_contains(tags, ") and (author == ")") and ((tags_terms like')
