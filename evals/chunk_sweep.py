"""`make eval-chunks` and `make eval-dense-models`: `ragc eval` once per chunk size or dense model, each into a
collection of its own, collated here into one table: retrieval figures per pipeline beside each variant's cost
(vectors stored, chunks it had to embed, ingest seconds).

Both are chosen on retrieval figures of TRAIN only (tuning them on generated answers overfits the generator,
and TEST is for reporting)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from evals.metrics import METRICS


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The eval results, by dense model, then smallest chunks first."""
    results = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    return sorted(results, key=lambda r: (dense_model(r), *chunk_order(r["chunking"]), enrichment(r)))


def chunk_order(chunking: dict[str, Any]) -> tuple[int, int, int]:
    return (chunking.get("sentence_window", 0), chunking["chunk_size"], chunking["chunk_overlap"])


def dense_model(result: dict[str, Any]) -> str:
    embedding = result.get("embedding")
    return f"{embedding['model_id'].rsplit('/', 1)[-1]} ({embedding['dim']}-d)" if embedding else "-"


def chunks(chunking: dict[str, Any]) -> str:
    if chunking.get("sentence_window"):
        return f"sentence window {chunking['sentence_window']}"
    return f"{chunking['chunk_size']} / {chunking['chunk_overlap']}"


def enrichment(result: dict[str, Any]) -> str:
    """`questions=3+summary:<model>:<prompt>` -> `3 questions + summary`; "-" when off (or from before it)."""
    written = str(result.get("enrichment") or "")
    if not written:
        return "-"
    parts = written.split(":")[0].split("+")
    return " + ".join(f"{p.split('=')[1]} questions" if p.startswith("questions=") else p for p in parts)


def variant(result: dict[str, Any]) -> str:
    chunking = result["chunking"]
    enriched = "" if enrichment(result) == "-" else f", {enrichment(result)} per chunk"
    if chunking.get("sentence_window"):
        return f"{dense_model(result)}, sentence window {chunking['sentence_window']}{enriched}"
    size = f"chunk size {chunking['chunk_size']}, overlap {chunking['chunk_overlap']}"
    return f"{dense_model(result)}, {size}{enriched}"


def vector_mb(result: dict[str, Any]) -> str:
    """The raw float32 vectors (the HNSW graph and the stored text come on top)."""
    embedding = result.get("embedding")
    return f"{result['ingest']['chunks_total'] * embedding['dim'] * 4 / 1e6:.1f}" if embedding else "-"


def best_size(results: list[dict[str, Any]], pipeline: str, metric: str = "ndcg@10") -> dict[str, Any]:
    return max(results, key=lambda r: r["pipelines"][pipeline][metric])


def table(results: list[dict[str, Any]]) -> str:
    pipelines = list(dict.fromkeys(p for r in results for p in r["pipelines"]))
    shown = [m for m in METRICS if m in ("ndcg@10", "recall@100")]
    head = ["dense model", "chunks", "enrichment", "vectors", "vector MB", "embedded this run", "ingest s"]
    head += [f"{p} {m}" for p in pipelines for m in shown]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in results:
        ingest, chunking = r["ingest"], r["chunking"]
        cells = [
            dense_model(r),
            chunks(chunking),
            enrichment(r),
            str(ingest["chunks_total"]),
            vector_mb(r),
            str(ingest["chunks_embedded"]),
            f"{ingest['seconds']:.0f}",
        ]
        cells += [f"{r['pipelines'][p][m]:.4f}" if p in r["pipelines"] else "-" for p in pipelines for m in shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: list[dict[str, Any]]) -> str:
    first = results[0]
    pipeline = "hybrid" if "hybrid" in first["pipelines"] else next(iter(first["pipelines"]))
    best = variant(best_size(results, pipeline))
    return (
        f"# Retrieval variants: {first['dataset']} ({first['split']}, {first['queries']} queries)\n\n"
        f"{table(results)}\n\nBest {pipeline} nDCG@10: {best}. Vectors reused from a run earlier (the same "
        "model and chunk text) are not embedded again, so `ingest s` is this run's cost, not a fresh build's.\n"
    )


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m evals.chunk_sweep OUT.md RESULT.json...", file=sys.stderr)
        return 2
    text = report(load([Path(a) for a in argv[1:]]))
    Path(argv[0]).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
