"""`ragc bench profile`: where a running service spends its time as the load grows.

Sweeps closed-loop concurrency (1, 2, 4, 8, 16 by default) over request variants that move cost (top_k,
rerank on/off, the response mode, repeated questions the cache can answer), against `ragc up` or any URL.
Per point: throughput, errors by code, end-to-end and per-stage p50/p95 (from each response's `stages`),
cache hits, and the bottleneck: the stage with the largest p50. Writes a CSV and two charts (latency per
stage vs concurrency for each variant; throughput vs concurrency) and prints one JSON line per point."""

from __future__ import annotations

import asyncio
import csv
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.query import LoadResult, closed_loop, load_questions

DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16)
REPEATED_QUESTIONS = 5  # the `cached` variant cycles these: after the first round the cache answers


@dataclass(frozen=True)
class Variant:
    name: str
    body: dict[str, Any]
    repeat: bool = False  # cycle a few questions (cache hits) instead of a question never asked in this run


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("default", {}),
        Variant("top_k=10", {"top_k": 10}),
        Variant("no_rerank", {"rerank": False}),
        Variant("no_text", {"mode": "no_text"}),
        Variant("cached", {}, repeat=True),
    )
}


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


def bottleneck(stage_p50_ms: dict[str, float]) -> str:
    """The stage with the largest median time; `-` when no stage reported any."""
    timed = {stage: ms for stage, ms in stage_p50_ms.items() if not math.isnan(ms)}
    return max(timed, key=lambda stage: timed[stage]) if timed else "-"


def point_row(variant: str, result: LoadResult) -> dict[str, Any]:
    stage_p50 = {stage: percentile(ms, 50) for stage, ms in result.stage_ms.items()}
    row: dict[str, Any] = {
        "variant": variant,
        "concurrency": result.clients,
        "requests": len(result.latencies_s),
        "errors": result.failures,
        "error_codes": json.dumps(result.failure_codes, sort_keys=True),
        "throughput_rps": round(result.qps, 3),
        "p50_ms": round(result.pct(50) * 1000, 1),
        "p95_ms": round(result.pct(95) * 1000, 1),
        "cache_hits": result.cache_hits,
        "bottleneck": bottleneck(stage_p50),
    }
    for stage in sorted(result.stage_ms):
        row[f"{stage}_p50_ms"] = round(stage_p50[stage], 1)
        row[f"{stage}_p95_ms"] = round(percentile(result.stage_ms[stage], 95), 1)
    return row


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)


def draw(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in rows))
    stages = sorted({c[: -len("_p50_ms")] for r in rows for c in r if c.endswith("_p50_ms") and c != "p50_ms"})
    colours = {stage: f"C{n}" for n, stage in enumerate(stages)}  # a stage keeps its colour in every panel
    fig, axes = plt.subplots(1, len(variants), figsize=(4 * len(variants), 4), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants, strict=True):
        points = [r for r in rows if r["variant"] == variant]
        levels = [r["concurrency"] for r in points]
        for stage in stages:
            values = [r.get(f"{stage}_p50_ms", math.nan) for r in points]
            if not all(math.isnan(v) for v in values):
                ax.plot(levels, values, marker="o", color=colours[stage], label=f"{stage} p50")
        ax.plot(levels, [r["p95_ms"] for r in points], "k--", marker="x", label="end to end p95")
        ax.set(title=variant, xlabel="concurrent clients", xscale="log", yscale="log")
        concurrency_ticks(ax, levels)
    axes[0][0].set_ylabel("ms")
    handles = [plt.Line2D([], [], color=colours[s], marker="o", label=f"{s} p50") for s in stages]
    handles.append(plt.Line2D([], [], color="k", linestyle="--", marker="x", label="end to end p95"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize="small")
    latency = out / "profile_stage_latency.png"
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(latency, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in variants:
        points = [r for r in rows if r["variant"] == variant]
        ax.plot([r["concurrency"] for r in points], [r["throughput_rps"] for r in points], marker="o", label=variant)
    # log scale: answers from the cache or without an LLM come hundreds of times faster than generated ones
    ax.set(xlabel="concurrent clients", ylabel="answers / s", xscale="log", yscale="log", title="throughput")
    concurrency_ticks(ax, sorted({r["concurrency"] for r in rows}))
    ax.legend(fontsize="small")
    throughput = out / "profile_throughput.png"
    fig.tight_layout()
    fig.savefig(throughput, dpi=110)
    plt.close(fig)
    return [latency, throughput]


def concurrency_ticks(ax: Any, levels: list[int]) -> None:
    """The measured client counts as plain numbers on a log axis (no 3x10^0 minor labels)."""
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(levels, [str(n) for n in levels])
    ax.xaxis.set_minor_formatter(NullFormatter())


async def sweep(
    url: str,
    questions: list[str],
    variants: list[Variant],
    concurrency: list[int],
    duration_s: float,
    headers: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Each point gets questions its variant has not asked before (the `cached` variant excepted), so the
    response cache answers only where the variant means it to: the variants' switches (top_k, rerank,
    mode) are part of the cache key, so each starts at the first question. A variant that runs out of
    questions goes round again, and its rows say so (`questions_reused`)."""
    rows: list[dict[str, Any]] = []
    for variant in variants:
        cursor = 0
        for clients in concurrency:
            start = cursor % len(questions)
            rotated = questions[start:] + questions[:start]
            asked = questions[:REPEATED_QUESTIONS] if variant.repeat else rotated
            name, body = variant.name, variant.body
            result = await closed_loop(url, asked, clients, duration_s, name, body=body, headers=headers)
            row = point_row(variant.name, result)
            if not variant.repeat:
                # what the loop asked: each answer counted, each failure, and each client's last, past the window
                cursor += len(result.latencies_s) + result.failures + clients
                row["questions_reused"] = cursor > len(questions)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def bench_profile(
    url: str,
    dataset: Path,
    variants: list[str],
    concurrency: list[int],
    duration_s: float,
    out: Path,
    api_key: str | None = None,
) -> int:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    questions = load_questions(dataset, 0)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    query_url = url.rstrip("/") + "/v1/query"
    rows = asyncio.run(sweep(query_url, questions, [VARIANTS[v] for v in variants], concurrency, duration_s, headers))
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "profile.csv")
    charts = draw(rows, out)
    summary = {
        "csv": str(out / "profile.csv"),
        "charts": [str(c) for c in charts],
        "bottlenecks": {f"{r['variant']}@{r['concurrency']}": r["bottleneck"] for r in rows},
        "errors": sum(r["errors"] for r in rows),
    }
    print(json.dumps(summary))
    return 0
