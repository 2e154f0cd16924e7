"""The extractive answer (every stage's last fallback)."""

from __future__ import annotations

from cluster.config import SynthesizeConfig
from serve.extractive import best_excerpt, extractive_answer
from serve.types import Passage


def test_extractive_answer_cites_the_passages_it_quotes() -> None:
    passages = [
        Passage("c1", "d1", "t", "# Title\n\nTenants are isolated by partition key. Unrelated sentence here."),
        Passage("c2", "d2", "t", "Another passage about caching."),
    ]
    result = extractive_answer("how are tenants isolated", passages, SynthesizeConfig(extractive_passages=2))
    assert result.cited == [1, 2] and result.grounded
    assert result.answer.startswith("Tenants are isolated by partition key.")
    assert "[1]" in result.answer and "# Title" not in result.answer
    assert best_excerpt("x", "", 100) == ""
