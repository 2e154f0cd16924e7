"""`ragc bench prefix`: time to first token with the engine's prefix cache off, then on, in one run.

The synthesis prompt is laid out so that prompts share a start: the system prompt, then the passages in
rank order, then the question. Three sets of prompts, each asked one at a time after a warm-up:
* `repeated`: the same question over the same passages (what a retry or a cache miss on a repeat sends);
* `shared_passages`: different questions over the same passages (popular documents);
* `overlapping`: one question over passage lists that share their first passages and differ in the last.
Printed: median time to first token per set with the cache off and on, and on / off."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from cluster.config import RagcConfig
from serve.llm.generation import GenerationParams
from serve.llm.prompts import synthesis_messages
from serve.types import Passage

if TYPE_CHECKING:
    from serve.llm.engine import LLMEngine

QUESTIONS = (
    "How are tenants kept apart?",
    "What happens when a document is edited?",
    "How does the reindex job avoid downtime?",
    "What does the cache key contain?",
    "How are failed ingests cleaned up?",
    "Which stage runs on GPUs?",
)
PASSAGES_PER_PROMPT = 3


def corpus_passages(folder: Path) -> list[Passage]:
    texts = [p for p in sorted(folder.rglob("*.md")) if p.is_file()]
    return [Passage(f"c{n}", p.name, "bench", p.read_text(encoding="utf-8"), title=p.stem) for n, p in enumerate(texts)]


def prompt_sets(passages: list[Passage], max_chars: int) -> dict[str, list[list[dict[str, str]]]]:
    """`warm_up`: prompts of the same size over passages no other set uses (the first generations at a new
    length pay one-off set-up on CPU that would otherwise land on the first set measured)."""
    fixed = passages[:PASSAGES_PER_PROMPT]
    head = passages[: PASSAGES_PER_PROMPT - 1]
    tails = passages[PASSAGES_PER_PROMPT - 1 :][: len(QUESTIONS)]
    unused = passages[-PASSAGES_PER_PROMPT:]
    return {
        "warm_up": [synthesis_messages(q, unused, max_chars) for q in QUESTIONS[:2]],
        "repeated": [synthesis_messages(QUESTIONS[0], fixed, max_chars) for _ in QUESTIONS],
        "shared_passages": [synthesis_messages(q, fixed, max_chars) for q in QUESTIONS],
        "overlapping": [synthesis_messages(QUESTIONS[0], [*head, tail], max_chars) for tail in tails],
    }


async def first_token_s(engine: LLMEngine, messages: list[dict[str, str]]) -> float:
    params = GenerationParams(max_tokens=4)
    started = time.perf_counter()
    async for _ in engine.stream(messages, params):
        return time.perf_counter() - started
    return time.perf_counter() - started


async def measure(engine: LLMEngine, sets: dict[str, list[list[dict[str, str]]]]) -> dict[str, float]:
    """Median TTFT per set; the first prompt of each set primes the cache and is left out."""
    await engine.ready()
    out = {}
    for name, prompts in sets.items():
        times = [await first_token_s(engine, messages) for messages in prompts]
        if name != "warm_up":
            out[name] = statistics.median(times[1:])
    return out


def bench_prefix(cfg: RagcConfig, corpus: Path) -> int:
    from serve.llm.engine import LLMEngine

    name = cfg.serve.synthesize.engine
    passages = corpus_passages(corpus)
    sets = prompt_sets(passages, cfg.serve.synthesize.passage_max_chars)
    results: dict[str, dict[str, float]] = {}
    for label, enabled in (("off", False), ("on", True)):
        ecfg = cfg.serve.llm.engines[name].model_copy(update={"enable_prefix_caching": enabled})
        engine = LLMEngine(ecfg, cfg.state_dir)
        loop = asyncio.new_event_loop()
        try:
            results[label] = loop.run_until_complete(measure(engine, sets))
        finally:
            engine.shutdown()
            loop.close()
        print(json.dumps({label: {k: round(v * 1000, 1) for k, v in results[label].items()}}), flush=True)
    prompt_tokens = engine.count_tokens(str(sets["repeated"][0][-1]["content"]))
    print(
        json.dumps(
            {
                "ttft_ms_off": {k: round(v * 1000, 1) for k, v in results["off"].items()},
                "ttft_ms_on": {k: round(v * 1000, 1) for k, v in results["on"].items()},
                "ttft_ratio_on_over_off": {k: round(results["on"][k] / results["off"][k], 3) for k in results["off"]},
                "user_prompt_tokens": prompt_tokens,
                "prompts_per_set": len(QUESTIONS),
            }
        )
    )
    return 0
