"""The retrieve stage's arm hits."""

from __future__ import annotations


def test_arm_hits_keep_only_the_arms_a_pipeline_uses() -> None:
    from serve.stages.retrieve import ArmHits

    hits = ArmHits({"dense": [{"id": "a"}], "bm25": [{"id": "b"}]}, {"dense": "ok", "bm25": "ok"}, True, "query")
    assert set(hits.only(dense=True, bm25=False).results) == {"dense"}
    assert hits.only(dense=False, bm25=True).arms == {"bm25": "ok"}
    assert hits.only(dense=True, bm25=True) == hits
