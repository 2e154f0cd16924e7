"""Reciprocal rank fusion."""

from __future__ import annotations

import pytest

from serve.fusion import rrf_fuse


def test_rrf_fuse_rewards_agreement() -> None:
    scores = rrf_fuse([["a", "b", "c"], ["b", "d"]], k=60)
    assert max(scores, key=lambda k: scores[k]) == "b"
    assert scores["a"] == pytest.approx(1 / 61)
