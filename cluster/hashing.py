"""Short stable content hashes used for ids and cache keys."""

from __future__ import annotations

import hashlib

HASH_CHARS = 32


def sha(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:HASH_CHARS]
