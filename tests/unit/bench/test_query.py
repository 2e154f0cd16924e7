"""Where `ragc bench query`'s slow answers lose their time."""

from __future__ import annotations

from math import inf

from bench.query import LoadResult, MeasuredWindow, autoscaler_quiet_s
from cluster.config import RagcConfig


def loaded(answers: list[tuple[float, dict[str, float]]]) -> LoadResult:
    return LoadResult("ours", 10.0, 4, latencies_s=[s for s, _ in answers], answers=answers)


def test_the_slowest_answers_split_into_their_stages_and_the_time_outside_them() -> None:
    result = loaded(
        [
            (1.0, {"retrieve": 100.0, "rerank": 800.0}),
            (2.0, {"retrieve": 100.0, "rerank": 1500.0}),
            (10.0, {"retrieve": 200.0, "rerank": 2000.0}),
        ]
    )
    assert result.time_split(95) == {
        "rerank": 2000.0,
        "retrieve": 200.0,
        "end_to_end": 10000.0,
        "outside_stages": 7800.0,
        "answers": 1,
    }
    every = result.time_split()
    assert every["answers"] == 3 and every["rerank"] == round((800 + 1500 + 2000) / 3, 1)
    assert every["outside_stages"] == round(13000 / 3 - (4300 + 400) / 3, 1)


def test_a_stage_that_did_not_run_counts_as_no_time() -> None:
    result = loaded([(1.0, {"retrieve": 100.0}), (1.0, {"retrieve": 100.0, "rerank": 600.0})])
    assert result.time_split()["rerank"] == 300.0
    assert loaded([]).time_split() == {}


def test_without_an_autoscaler_to_wait_for_the_window_opens_after_the_warm_up() -> None:
    window = MeasuredWindow(duration_s=60.0, warm_up_s=20.0)
    window.begin(100.0)
    assert (window.start, window.stop, window.settled) == (120.0, 180.0, True)
    assert not window.counts(119.9) and window.counts(150.0) and not window.counts(180.1)
    assert window.running(179.0) and not window.running(180.0)


def test_the_window_waits_for_quiet_replicas_and_for_requests_queued_before_the_scale_out() -> None:
    changed = [100.0]  # the replicas' last change, as ReplicaTimeline.last_change reports it
    window = MeasuredWindow(duration_s=60.0, warm_up_s=20.0, changed_at=lambda: changed[0], quiet_s=10.0)
    window.begin(100.0)
    assert window.running(1e9) and not window.counts(110.0)  # no window yet: the load goes on
    window.poll(115.0, [])
    assert window.start == inf  # still in the warm-up
    changed[0] = 121.0  # a second replica arrived
    window.poll(125.0, [122.0])
    assert window.start == inf  # replicas not quiet for 10 s
    window.poll(131.5, [118.0, 130.0])
    assert window.start == inf  # one request in flight was queued behind the single replica
    window.poll(133.0, [125.0, 130.0])
    assert (window.start, window.stop, window.settled) == (133.0, 193.0, True)
    window.poll(140.0, [])
    assert window.start == 133.0  # opened once


def test_replicas_that_never_settle_open_the_window_at_the_cap_and_say_so() -> None:
    changed = [85.0]
    window = MeasuredWindow(
        duration_s=30.0, warm_up_s=20.0, changed_at=lambda: changed[0], quiet_s=10.0, max_warm_up_s=90.0
    )
    window.begin(0.0)
    window.poll(89.0, [86.0])
    assert window.start == inf
    changed[0] = 88.0  # replicas still coming and going
    window.poll(90.0, [89.0])
    assert (window.start, window.stop, window.settled) == (90.0, 120.0, False)


def test_the_quiet_period_covers_the_slowest_stage_autoscaler() -> None:
    cfg = RagcConfig()
    cfg.serve.deployments["rerank"].look_back_period_s = 45.0
    assert autoscaler_quiet_s(cfg) == 45.0 + 3.0 + 10.0
