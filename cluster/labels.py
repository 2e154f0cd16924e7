"""Labels: a document's tags and access groups, and an API key's groups. A filter matches them exactly, and a
filter value may hold no quote, backslash or control character (serve/edge/filters.py), so neither may a label."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

LABELS_MAX = 64  # per document (its tags; its access groups) and per key
LABEL_MAX = 128  # characters per label
PUBLIC = "*"  # the access group of a document that declares none: every key of its tenant reads it
# The terms' form is stored data: a collection written in another form matches nothing (every restricted and
# every public chunk unread: closed, not open), so changing it needs a `ragc reindex`.
TERM_CHARS = 32  # hex digits of a label's term: 128 bits of its SHA-256
TERMS_SEPARATOR = ","  # special neither to LIKE nor to the regular expression a server may make of it
TERMS_MAX = LABELS_MAX * (TERM_CHARS + 1) + 1  # the longest `label_terms`


def label_term(label: str) -> str:
    """A label as a fixed-length token of hex digits: nothing in it that a LIKE pattern reads specially (a label
    may hold `%`, `_` or the separator), and no term is part of another."""
    return hashlib.sha256(label.encode()).hexdigest()[:TERM_CHARS]


def label_terms(labels: Iterable[str]) -> str:
    """`,t1,t2,`: the labels' terms, each between separators. A scalar string that a LIKE filter matches at
    the cost of a scalar filter: milvus-lite filters an ARRAY field ~30x slower than a scalar one (ARCHITECTURE.md,
    Access groups), and refuses an index on it."""
    return TERMS_SEPARATOR + "".join(label_term(label) + TERMS_SEPARATOR for label in labels)


def check_labels(labels: Iterable[str], what: str) -> list[str]:
    """Stripped, blank ones dropped, each once (first place kept); raises ValueError naming `what`."""
    kept = list(dict.fromkeys(label.strip() for label in labels if label.strip()))
    if len(kept) > LABELS_MAX:
        raise ValueError(f"at most {LABELS_MAX} {what}, got {len(kept)}")
    for label in kept:
        if len(label) > LABEL_MAX:
            raise ValueError(f"one of the {what} is longer than {LABEL_MAX} characters: {label[:40]!r}...")
        if any(ord(c) < 32 for c in label) or any(c in label for c in "\"'\\"):
            raise ValueError(f"{label!r} in {what} holds a quote, backslash or control character")
    return kept
