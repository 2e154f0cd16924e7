"""The questions a trained reranker knows: the vectors of the questions it was trained on, and how close a
question must come to them to count as one of its kind.

A reranker fine-tuned on one corpus can lower quality on another (SciFact's, on Wikipedia turns: -0.10
nDCG@10), even fused with the retrieval rank. A question's closeness is the mean cosine of its `neighbours`
nearest training questions; the threshold is the closeness that `coverage` of the questions held out of
training (never trained on) reach. Below it, the stage keeps the fusion order."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

DOMAIN_RECORD = "ragc_domain.json"
DOMAIN_VECTORS = "ragc_domain.npy"


@dataclass
class RerankDomain:
    reference: np.ndarray = field(repr=False)  # unit vectors of the training questions, one per row
    neighbours: int
    threshold: float
    coverage: float
    embedding_model_id: str
    held_out: int  # held-out questions the threshold was read from

    @classmethod
    def build(
        cls,
        trained: Sequence[Sequence[float]],
        held_out: Sequence[Sequence[float]],
        neighbours: int,
        coverage: float,
        embedding_model_id: str,
    ) -> RerankDomain:
        """`trained`, `held_out`: unit vectors of the questions trained on and of questions kept out of it."""
        if len(trained) == 0 or len(held_out) == 0:
            raise ValueError("a domain needs the trained questions and some held out of training")
        domain = cls(np.asarray(trained, dtype=np.float32), neighbours, 0.0, coverage, embedding_model_id, 0)
        closeness = domain.closeness(held_out)
        domain.threshold = float(np.quantile(closeness, 1.0 - coverage))
        domain.held_out = len(held_out)
        return domain

    def closeness(self, vectors: Sequence[Sequence[float]]) -> np.ndarray:
        """Each question's mean cosine to its nearest training questions."""
        cosines = np.asarray(vectors, dtype=np.float32) @ self.reference.T
        k = min(self.neighbours, self.reference.shape[0])
        return np.sort(cosines, axis=1)[:, -k:].mean(axis=1)

    def inside(self, vector: Sequence[float]) -> tuple[bool, float]:
        """Whether the question is of the reranker's kind, and its closeness."""
        closeness = float(self.closeness([vector])[0])
        return closeness >= self.threshold, closeness

    def summary(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if k != "reference"} | {"trained": len(self.reference)}

    def save(self, folder: Path) -> None:
        np.save(folder / DOMAIN_VECTORS, self.reference)
        record = {k: v for k, v in self.summary().items() if k != "trained"}
        (folder / DOMAIN_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> RerankDomain | None:
        """The domain saved with a reranker, or None (a reranker trained before domains, or a model id)."""
        record_path = Path(folder) / DOMAIN_RECORD
        if not record_path.is_file():
            return None
        record = json.loads(record_path.read_text(encoding="utf-8"))
        return cls(np.load(Path(folder) / DOMAIN_VECTORS), **record)
