"""Cross-encoder scores kept on disk between evaluation runs of one reranker.

The gate scores the same (question, passage) pairs more than once: `ragc eval` on SciFact and then on its
abstention variant (the same test questions over nearly the same corpus). A score depends only on the
weights, the scoring settings and the two texts, so it is looked up by a hash of all four; another
reranker (or the same directory retrained) has other weights and finds nothing. Timed pipeline figures
never read this store (they always score); only the answerability features do."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from cluster.config import RagcConfig, RerankConfig
from cluster.models import pick_device, pick_reranker_precision, resolve_model_path

Pair = tuple[str, str]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")
LOCK_WAIT_S = 120.0


def reranker_fingerprint(cfg: RerankConfig) -> str:
    """Hash of the weight files' bytes and the settings that change a score (max_length, dtype)."""
    assert cfg.model is not None
    root = Path(resolve_model_path(cfg.model))
    digest = hashlib.sha256(f"{cfg.max_length}|{pick_reranker_precision(cfg.dtype, pick_device('auto'))}".encode())
    weights = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES) if root.is_dir() else []
    if not weights:  # a hub id resolved by the loader: its name is all there is to go on
        digest.update(cfg.model.encode())
    for path in weights:
        digest.update(path.relative_to(root).as_posix().encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class PairScoreStore:
    """One SQLite table of scores per file; keys are sha256(fingerprint, question, passage)."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # two evaluations of one reranker may run at once (the gate calibrates beside its SciFact scoring): a
        # writer waits for the other's short transaction instead of failing after sqlite's default 5 s
        self._db = sqlite3.connect(path, timeout=LOCK_WAIT_S)
        self._db.execute("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, score REAL NOT NULL)")
        self._fingerprint = fingerprint
        self.reused = 0
        self.stored = 0

    def _key(self, pair: Pair) -> str:
        return hashlib.sha256("\x00".join((self._fingerprint, *pair)).encode()).hexdigest()

    def get(self, pairs: Sequence[Pair]) -> dict[Pair, float]:
        keys = {self._key(p): p for p in pairs}
        found: dict[Pair, float] = {}
        items = list(keys)
        for start in range(0, len(items), 500):  # SQLite's bound-parameter limit
            chunk = items[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, score in self._db.execute(f"SELECT key, score FROM scores WHERE key IN ({marks})", chunk):
                found[keys[key]] = float(score)
        self.reused += len(found)
        return found

    def put(self, pairs: Sequence[Pair], scores: Sequence[float]) -> None:
        rows = [(self._key(p), float(s)) for p, s in zip(pairs, scores, strict=True)]
        with self._db:
            self._db.executemany("INSERT OR REPLACE INTO scores (key, score) VALUES (?, ?)", rows)
        self.stored += len(rows)

    def close(self) -> None:
        self._db.close()


def pair_store_for(cfg: RagcConfig) -> PairScoreStore | None:
    """The state directory's store for the configured reranker (None without one)."""
    if cfg.serve.rerank.model is None:
        return None
    return PairScoreStore(cfg.state_dir / "eval" / "pair_scores.sqlite", reranker_fingerprint(cfg.serve.rerank))
