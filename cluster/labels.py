"""Labels: a document's tags and access groups, and an API key's groups. A filter matches them exactly, and a
filter value may hold no quote, backslash or control character (serve/edge/filters.py), so neither may a label."""

from __future__ import annotations

from collections.abc import Iterable

LABELS_MAX = 64  # per document (its tags; its access groups) and per key
LABEL_MAX = 128  # characters per label
PUBLIC = "*"  # the access group of a document that declares none: every key of its tenant reads it


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
