"""The retrieve stage's arm hits."""

from __future__ import annotations


def test_arm_hits_keep_only_the_arms_a_pipeline_uses() -> None:
    from serve.stages.retrieve import ArmHits

    hits = ArmHits({"dense": [{"id": "a"}], "bm25": [{"id": "b"}]}, {"dense": "ok", "bm25": "ok"}, True, "query")
    assert set(hits.only(dense=True, bm25=False).results) == {"dense"}
    assert hits.only(dense=False, bm25=True).arms == {"bm25": "ok"}
    assert hits.only(dense=True, bm25=True) == hits


def test_a_failed_arm_names_the_grpc_status_rather_than_its_repr() -> None:
    import grpc

    from serve.stages.retrieve import rpc_reason

    class DeadlineError(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.DEADLINE_EXCEEDED

        def details(self) -> str:
            return "Deadline Exceeded"

    assert rpc_reason(DeadlineError()) == "DEADLINE_EXCEEDED: Deadline Exceeded"
    assert rpc_reason(RuntimeError("milvus unreachable")) == "milvus unreachable"
