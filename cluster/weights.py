"""The identity of an embedding model's weights: a hash of the files in its directory (weights, config,
pooling, tokenizer), so another model served under the same `model_id` is caught before its vectors mix
with the collection's, and the shared embedding cache keys vectors by it."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from cluster.models import resolve_model_path

CHUNK_BYTES = 1 << 20
FINGERPRINT_CHARS = 16


def weights_fingerprint(reference: str) -> str:
    """Hex digest over every file that shapes the vectors (documentation and hidden files left out); "" when
    the reference is not a local directory (a bare model id the loader resolves): nothing to hash."""
    root = Path(resolve_model_path(reference))
    if not root.is_dir():
        return ""
    files = sorted(p for p in root.rglob("*") if p.is_file() and _shapes_vectors(p.relative_to(root)))
    # re-hashed only when a file's size or mtime changed: readiness probes ask for this every few seconds
    signature = tuple((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _digest(str(root), signature)


def _shapes_vectors(rel: Path) -> bool:
    return not any(part.startswith(".") for part in rel.parts) and rel.suffix.lower() != ".md"


@lru_cache(maxsize=16)
def _digest(root: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    total = hashlib.sha256()
    for rel, _, _ in signature:
        one = hashlib.sha256()
        with (Path(root) / rel).open("rb") as handle:
            while block := handle.read(CHUNK_BYTES):
                one.update(block)
        total.update(f"{rel}\x00{one.hexdigest()}\n".encode())
    return total.hexdigest()[:FINGERPRINT_CHARS]
