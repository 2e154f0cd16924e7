"""Where `ragc bench query`'s slow answers lose their time."""

from __future__ import annotations

from bench.query import LoadResult


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
