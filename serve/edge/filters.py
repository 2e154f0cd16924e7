"""Request filters -> a Milvus expression. Fields and operators come from config; values are
type-checked and escaped here, so nothing a client sends is pasted into an expression."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cluster.config import FilterField, LimitsConfig
from cluster.store.expr import holds_any_label, literal
from serve.edge.text_rules import check_encodable
from serve.errors import BadRequestError

OPERATORS = {"eq": "==", "ne": "!=", "gte": ">=", "lte": "<="}
ARRAY_FUNCTIONS = {"contains_any": "array_contains_any", "contains_all": "array_contains_all"}
MAX_STR = 1024
# A string literal (skipped whole: the scan never starts a match inside one) or a clause `compile_filters` writes
# on a list field. Its literals hold no quote or backslash (`_typed` refuses them), so each is `"[^"]*"`.
_LITERAL = r'"[^"]*"'
LABEL_CLAUSE = re.compile(
    rf"{_LITERAL}|array_contains(?P<op>_any|_all)?\((?P<field>\w+), "
    rf"(?P<values>{_LITERAL}|\[{_LITERAL}(?:, {_LITERAL})*\])\)"
)


def _typed(field: str, spec: FilterField, value: Any) -> str | int:
    """One value of the field's type (an element, for a str_list field)."""
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequestError(f"filter {field!r} takes an integer, got {type(value).__name__}")
        if abs(value) >= 2**63:
            raise BadRequestError(f"filter {field!r}: integer out of range")
        return value
    if not isinstance(value, str):
        raise BadRequestError(f"filter {field!r} takes a string, got {type(value).__name__}")
    if len(value) > MAX_STR:
        raise BadRequestError(f"filter {field!r}: value longer than {MAX_STR} characters")
    if any(ord(c) < 32 for c in value):
        raise BadRequestError(f"filter {field!r}: control characters are not allowed")
    check_encodable(value, f"filter {field!r}")
    if any(c in value for c in "\"'\\"):
        # values are escaped anyway; refusing quotes outright makes injection attempts visible as 400s
        raise BadRequestError(f"filter {field!r}: quotes and backslashes are not allowed in values")
    return value


def compile_filters(filters: dict[str, Any], allowed: dict[str, FilterField], limits: LimitsConfig) -> str:
    """`{"year": {"gte": 2020}, "doc_type": "md"}` -> `(year >= 2020) and (doc_type == "md")`."""
    if len(filters) > limits.max_filters:
        raise BadRequestError(f"too many filters ({len(filters)} > {limits.max_filters})")
    clauses: list[str] = []
    for field, condition in filters.items():
        spec = allowed.get(field)
        if spec is None:
            raise BadRequestError(f"unknown filter field {field!r}; allowed: {sorted(allowed)}")
        # a bare value: equality, or for a list field that it holds the value
        ops = condition if isinstance(condition, dict) else {"contains" if spec.type == "str_list" else "eq": condition}
        if not ops:
            raise BadRequestError(f"filter {field!r} has no condition")
        for op, value in ops.items():
            if op not in spec.ops:
                raise BadRequestError(f"operator {op!r} is not allowed on {field!r}; allowed: {spec.ops}")
            if op in ("in", *ARRAY_FUNCTIONS):
                listed = ", ".join(literal(_typed(field, spec, v)) for v in _values(field, op, value, limits))
                clauses.append(
                    f"{field} in [{listed}]" if op == "in" else f"{ARRAY_FUNCTIONS[op]}({field}, [{listed}])"
                )
            elif op == "contains":
                clauses.append(f"array_contains({field}, {literal(_typed(field, spec, value))})")
            else:
                clauses.append(f"{field} {OPERATORS[op]} {literal(_typed(field, spec, value))}")
    return " and ".join(f"({c})" for c in clauses)


def _values(field: str, op: str, value: Any, limits: LimitsConfig) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise BadRequestError(f"filter {field!r}: {op!r} takes a non-empty list")
    if len(value) > limits.max_in_values:
        raise BadRequestError(f"filter {field!r}: more than {limits.max_in_values} values")
    return value


def on_label_terms(expr: str, terms: Mapping[str, str]) -> str:
    """`expr`, as `compile_filters` wrote it, with each clause on a list field in `terms` (field -> its terms
    field, where the serving collection stores them) matching the terms instead: the same chunks, at the cost
    of a scalar filter rather than an ARRAY one (cluster/labels.py)."""

    def on_terms(clause: re.Match[str]) -> str:
        field = clause["field"]
        if field not in terms:  # a string literal, or a list field without terms
            return clause[0]
        values = json.loads(clause["values"])
        labels = [values] if isinstance(values, str) else values
        if clause["op"] == "_all":
            return "(" + " and ".join(f"({holds_any_label(terms[field], [label])})" for label in labels) + ")"
        return f"({holds_any_label(terms[field], labels)})"

    return LABEL_CLAUSE.sub(on_terms, expr)
