"""`ragc bench llm`: the LLM stages, measured in one run.

Throughput: tokens/s through the Serve LLM deployment (a streaming handle, as the synthesis stage calls
it) divided by the same `LLMEngine` class driven directly in this process (the baseline), for one
request and for 8 concurrent ones, over the same prompts (greedy, so both sides generate the same text).

Rewrite quality on TREC CAsT 2020 (manual rewrites as references): token F1 of our rewrite against the
manual rewrite, beside the raw utterance's F1 against it. The stage earns its latency only if it wins."""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cluster.config import RagcConfig
from cluster.ray_runtime import ensure_ray
from serve.llm.generation import GenerationParams, HandleGenerator, TextGenerator, collect
from serve.llm.prompts import synthesis_messages
from serve.stages.rewrite import RewriteStage
from serve.types import Passage

CAST_FILE = "2020_2020_manual_evaluation_topics_v1.0.json"
WORD = re.compile(r"[a-z0-9]+")
QUESTIONS = (
    "How are tenants kept apart?",
    "What happens when a document is edited?",
    "Why does retrieval fuse two searches?",
    "What does the cache key contain?",
    "How is the similarity floor chosen?",
    "What does reindex do with the old collection?",
    "How are failed ingests cleaned up?",
    "What runs on GPUs in production?",
)
PASSAGE = (
    "Every chunk carries its tenant id; the server adds the tenant clause to both retrieval arms and "
    "checks every passage's tenant afterwards. Editing a document re-embeds only its changed chunks."
)


def token_f1(candidate: str, reference: str) -> float:
    cand, ref = Counter(WORD.findall(candidate.lower())), Counter(WORD.findall(reference.lower()))
    common = sum((cand & ref).values())
    if not common:
        return 0.0
    precision, recall = common / sum(cand.values()), common / sum(ref.values())
    return 2 * precision * recall / (precision + recall)


def prompts() -> list[list[dict[str, str]]]:
    passages = [Passage(f"c{i}", f"d{i}", "bench", PASSAGE, title=f"Doc {i}") for i in range(3)]
    return [synthesis_messages(q, passages, 900) for q in QUESTIONS]


async def tokens_per_s(llm: TextGenerator, count_tokens: Any, concurrency: int, max_tokens: int) -> float:
    params = GenerationParams(max_tokens=max_tokens)
    batch = prompts()[:concurrency]

    async def one(messages: list[dict[str, str]]) -> int:
        return count_tokens((await collect(llm.stream(messages, params))).text)

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(m) for m in batch))
    return sum(counts) / (time.perf_counter() - started)


async def measure(llm: TextGenerator, count_tokens: Any, max_tokens: int, repeats: int = 3) -> dict[str, float]:
    """Median of `repeats` runs of each (the machine is shared and noisy), after a warm-up."""
    await tokens_per_s(llm, count_tokens, 1, 8)
    single = [await tokens_per_s(llm, count_tokens, 1, max_tokens) for _ in range(repeats)]
    concurrent = [await tokens_per_s(llm, count_tokens, 8, max_tokens) for _ in range(repeats)]
    return {"single": statistics.median(single), "concurrent_8": statistics.median(concurrent)}


def cast_turns(dataset: Path, limit: int) -> list[dict[str, Any]]:
    """Follow-up turns (number > 1) with the earlier raw utterances of their conversation as history."""
    topics = json.loads((dataset / CAST_FILE).read_text(encoding="utf-8"))
    out: list[dict[str, Any]] = []
    for topic in topics:
        history: list[dict[str, str]] = []
        for turn in topic["turn"]:
            if history:
                out.append(
                    {
                        "raw": turn["raw_utterance"],
                        "manual": turn["manual_rewritten_utterance"],
                        "history": list(history),
                    }
                )
            history.append({"role": "user", "content": turn["raw_utterance"]})
    return out[:limit] if limit else out


async def rewrite_quality(stage: RewriteStage, turns: list[dict[str, Any]]) -> dict[str, Any]:
    ours: list[float] = []
    raw: list[float] = []
    statuses: Counter[str] = Counter()
    started = time.perf_counter()
    for turn in turns:
        result = await stage.rewrite(turn["raw"], turn["history"], True, False)
        statuses[result.status] += 1
        ours.append(token_f1(result.query, turn["manual"]))
        raw.append(token_f1(turn["raw"], turn["manual"]))
    seconds = time.perf_counter() - started
    return {
        "turns": len(turns),
        "f1_rewrite": round(sum(ours) / len(ours), 4),
        "f1_raw_utterance": round(sum(raw) / len(raw), 4),
        "statuses": dict(statuses),
        "mean_rewrite_ms": round(1000 * seconds / len(turns), 1),
    }


def bench_llm(cfg: RagcConfig, dataset: Path, limit: int, max_tokens: int = 96) -> int:
    """Baseline: the bare engine measured while Ray and Serve run idle beside it (on a small machine their
    background processes take CPU from the engine too); the figure before Ray started is printed as well."""
    from ray import serve

    from serve.app import deployment_options
    from serve.llm.engine import LLMEngine, engine_deployment_name

    engine_name = cfg.serve.synthesize.engine
    engine = LLMEngine(**LLMEngine.tree_args(cfg, engine_name))
    loop = asyncio.new_event_loop()
    before_ray = loop.run_until_complete(measure(engine, engine.count_tokens, max_tokens))
    quality = loop.run_until_complete(
        rewrite_quality(RewriteStage(**RewriteStage.tree_args(cfg), llm=engine), cast_turns(dataset, limit))
    )
    print(json.dumps({"bare_before_ray": before_ray, "rewrite": quality}), flush=True)
    ensure_ray(cfg)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    bare = loop.run_until_complete(measure(engine, engine.count_tokens, max_tokens))
    engine.shutdown()
    loop.close()

    deployment = cfg.serve.llm.engines[engine_name].deployment.model_copy(update={"num_cpus": 0.0})
    options = deployment_options(engine_deployment_name(engine_name), deployment)
    app = serve.deployment(**options)(LLMEngine).bind(**LLMEngine.tree_args(cfg, engine_name))
    handle = serve.run(app, name="bench-llm", route_prefix=None)
    served = asyncio.run(measure(HandleGenerator(handle), engine.count_tokens, max_tokens))
    serve.delete("bench-llm")
    report = {
        "bench": "llm",
        "model": cfg.serve.llm.engines[engine_name].model,
        "max_tokens": max_tokens,
        "bare_before_ray_tokens_per_s": {k: round(v, 1) for k, v in before_ray.items()},
        "bare_tokens_per_s": {k: round(v, 1) for k, v in bare.items()},
        "serve_tokens_per_s": {k: round(v, 1) for k, v in served.items()},
        "ratio_single": round(served["single"] / bare["single"], 3),
        "ratio_concurrent_8": round(served["concurrent_8"] / bare["concurrent_8"], 3),
        "rewrite_on_trec_cast": quality,
    }
    print(json.dumps(report))
    return 0
