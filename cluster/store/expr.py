"""Build Milvus boolean expressions from values, never by pasting user text."""

from __future__ import annotations

import re
from collections.abc import Iterable

from cluster.labels import TERMS_SEPARATOR, label_term

_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def quote(value: str) -> str:
    """A Milvus string literal for `value` (escaped, double-quoted)."""
    return '"' + value.translate(_ESCAPES) + '"'


def literal(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return quote(value)


def eq(field: str, value: str | int | float | bool) -> str:
    return f"{field} == {literal(value)}"


def is_in(field: str, values: Iterable[str | int | float]) -> str:
    return f"{field} in [{', '.join(literal(v) for v in values)}]"


def holds_any_label(field: str, labels: Iterable[str]) -> str:
    """`field`, written by `cluster.labels.label_terms`, holds one of `labels`."""
    sep = TERMS_SEPARATOR
    return " or ".join(f'{field} like "%{sep}{label_term(label)}{sep}%"' for label in labels)


def all_of(*clauses: str) -> str:
    parts = [c for c in clauses if c]
    if len(parts) == 1:
        return parts[0]
    return " and ".join(f"({c})" for c in parts)


def fields_named(expr: str, names: Iterable[str]) -> set[str]:
    """Which of `names` an expression reads as a field (words inside its string literals are values)."""
    bare = _STRING_LITERAL.sub('""', expr)
    return {name for name in names if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", bare)}
