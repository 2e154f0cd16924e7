"""Synthesis helpers (the stage itself: test_llm_stages.py, test_response_modes.py)."""

from __future__ import annotations

from serve.stages.synthesize import validate_citations


def test_citations_to_nothing_are_removed_and_counted() -> None:
    cleaned, cited, removed = validate_citations("A [1]. B [7]. C [2][0].", passages_sent=2)
    assert cited == [1, 2] and removed == 2
    assert "[7]" not in cleaned and "[0]" not in cleaned
