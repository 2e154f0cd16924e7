"""`ragc bench profile`'s per-point figures, bottleneck, CSV and charts."""

import csv
import math
from pathlib import Path

import pytest

from bench.profile import bottleneck, draw, point_row, write_csv
from bench.query import LoadResult


def result(clients: int, rerank_ms: list[float]) -> LoadResult:
    out = LoadResult("default", seconds=10.0, clients=clients, latencies_s=[0.5, 1.0, 2.0, 4.0], failures=1)
    out.failure_codes = {"503": 1}
    out.stage_ms = {"retrieve": [30.0, 40.0, 50.0], "rerank": rerank_ms, "cache": [1.0, 1.0, 2.0]}
    out.cache_hits = 1
    return out


def test_the_bottleneck_is_the_stage_with_the_largest_median() -> None:
    assert bottleneck({"retrieve": 40.0, "rerank": 1500.0, "cache": 1.0}) == "rerank"
    assert bottleneck({"retrieve": 40.0, "rerank": math.nan}) == "retrieve"
    assert bottleneck({}) == "-"


def test_a_point_row_carries_throughput_errors_and_each_stage_p50_p95() -> None:
    row = point_row("default", result(4, [900.0, 1000.0, 1100.0]))
    assert row["requests"] == 4 and row["errors"] == 1 and row["error_codes"] == '{"503": 1}'
    assert row["throughput_rps"] == 0.4 and row["p50_ms"] == 1500.0 and row["cache_hits"] == 1
    assert row["rerank_p50_ms"] == 1000.0 and row["rerank_p95_ms"] == 1090.0 and row["retrieve_p50_ms"] == 40.0
    assert row["bottleneck"] == "rerank"


def test_the_csv_holds_every_column_of_every_point_and_two_charts_are_drawn(tmp_path: Path) -> None:
    no_rerank = result(1, [])
    no_rerank.stage_ms.pop("rerank")
    rows = [
        point_row("no_rerank", no_rerank),
        point_row("default", result(1, [900.0])),
        point_row("default", result(2, [1200.0])),
    ]
    write_csv(rows, tmp_path / "profile.csv")
    with (tmp_path / "profile.csv").open(encoding="utf-8") as handle:
        read = list(csv.DictReader(handle))
    assert [r["variant"] for r in read] == ["no_rerank", "default", "default"]
    assert read[0]["rerank_p50_ms"] == "" and read[1]["rerank_p50_ms"] == "900.0"
    charts = draw(rows, tmp_path)
    assert [c.name for c in charts] == ["profile_stage_latency.png", "profile_throughput.png"]
    assert all(c.stat().st_size > 10_000 for c in charts)


def test_each_variant_starts_at_the_first_question_and_its_levels_ask_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import bench.profile as profile

    firsts: list[tuple[str, int, str, int]] = []

    async def fake_loop(
        url: str, asked: list[str], clients: int, duration_s: float, name: str, **_: object
    ) -> LoadResult:
        firsts.append((name, clients, asked[0], len(asked)))
        return LoadResult(name, duration_s, clients, latencies_s=[0.1] * 3)  # 3 answers + 1 past the window each

    monkeypatch.setattr(profile, "closed_loop", fake_loop)
    questions = [f"q{n}" for n in range(10)]
    variants = [profile.VARIANTS["default"], profile.VARIANTS["no_rerank"], profile.VARIANTS["cached"]]
    rows = asyncio.run(profile.sweep("http://x/v1/query", questions, variants, [1, 2], 1.0))
    assert firsts == [
        ("default", 1, "q0", 10),
        ("default", 2, "q4", 10),  # q0-q2 answered, q3 past the window
        ("no_rerank", 1, "q0", 10),
        ("no_rerank", 2, "q4", 10),
        ("cached", 1, "q0", profile.REPEATED_QUESTIONS),
        ("cached", 2, "q0", profile.REPEATED_QUESTIONS),
    ]
    assert [r["questions_reused"] for r in rows if r["variant"] == "default"] == [False, False]
