"""Query rewrite (conversation -> one self-contained query) and HyDE, both through the LLM. Every output
is checked (serve.prompts); a refused or failed part falls back to the original query and says so.
Without an LLM the stage passes the query through and says `skipped`."""

from __future__ import annotations

import json
from typing import Any

from cachetools import TTLCache

from cluster.config import RagcConfig, RewriteConfig
from serve.faults import FaultHooks
from serve.llm.generation import GenerationParams, as_generator
from serve.llm.prompts import (
    REWRITE_PATTERN,
    clean_hyde,
    clean_paraphrases,
    clean_rewrite,
    hyde_messages,
    multi_query_messages,
    multi_query_pattern,
    recent_history,
    rewrite_messages,
)
from serve.types import RewriteResult, StageStatusName, Usage


class RewriteStage(FaultHooks):
    def __init__(self, cfg: RewriteConfig, llm: Any = None, fault_delay_s: float = 0.0) -> None:
        self._cfg = cfg
        self._llm = as_generator(llm)
        self.inject_delay(fault_delay_s)
        self._cache: TTLCache[str, RewriteResult] | None = (
            TTLCache(self._cfg.cache_entries, self._cfg.cache_ttl_s) if self._cfg.cache_entries else None
        )

    @staticmethod
    def tree_args(tree: RagcConfig) -> dict[str, Any]:
        """This stage's arguments out of the whole tree (the app builder binds them)."""
        return {"cfg": tree.serve.rewrite, "fault_delay_s": tree.serve.faults.delay_s.get("rewrite", 0.0)}

    async def rewrite(
        self, query: str, history: list[dict[str, str]], rewrite: bool, hyde: bool, multi_query: bool = False
    ) -> RewriteResult:
        await self._injected_delay()
        if self._llm is None:
            return RewriteResult(query=query, status="skipped", detail="no LLM configured")
        turns = recent_history(history, self._cfg.history_turns, self._cfg.history_max_chars) if rewrite else []
        key = json.dumps([query, turns, rewrite, hyde, multi_query])
        cached = self._cache.get(key) if self._cache is not None else None
        if cached is not None:
            return RewriteResult(
                cached.query, cached.hyde_passage, "cached", cached.detail, paraphrases=list(cached.paraphrases)
            )
        result = await self._run(query, turns, rewrite, hyde, multi_query)
        if self._cache is not None and result.status == "ok":
            self._cache[key] = result
        return result

    async def _run(
        self, query: str, turns: list[dict[str, str]], rewrite: bool, hyde: bool, multi_query: bool = False
    ) -> RewriteResult:
        assert self._llm is not None
        notes: list[str] = []
        refused = False
        used = query
        usage = Usage()
        if rewrite and turns:
            params = GenerationParams(self._cfg.max_tokens, regex=REWRITE_PATTERN)
            generated = await self._llm.generate(rewrite_messages(query, turns), params)
            usage += generated.usage
            candidate, reason = clean_rewrite(generated.text, query, turns, self._cfg.max_query_chars)
            if candidate is None:
                refused = True
                notes.append(f"original query used: {reason}")
            else:
                used = candidate
                notes.append("rewritten")
        elif rewrite:
            notes.append("no history to resolve")
        passage = None
        if hyde:
            generated = await self._llm.generate(hyde_messages(used), GenerationParams(self._cfg.hyde_max_tokens))
            usage += generated.usage
            passage = clean_hyde(generated.text)
            if passage is None:
                refused = True
                notes.append("HyDE passage refused (empty): question embedded alone")
            else:
                notes.append("HyDE passage")
        paraphrases: list[str] = []
        if multi_query:
            n = self._cfg.multi_queries
            params = GenerationParams(self._cfg.multi_query_max_tokens, regex=multi_query_pattern(n))
            generated = await self._llm.generate(multi_query_messages(used, n), params)
            usage += generated.usage
            paraphrases = clean_paraphrases(generated.text, used, n, self._cfg.max_query_chars)
            if paraphrases:
                notes.append(f"{len(paraphrases)} paraphrase(s) searched beside the query")
            else:
                refused = True
                notes.append("paraphrases refused (repeats or off the subject): the query searched alone")
        did_something = used != query or passage is not None or bool(paraphrases)
        status: StageStatusName = "fallback" if refused else ("ok" if did_something else "skipped")
        return RewriteResult(
            query=used,
            hyde_passage=passage,
            status=status,
            detail="; ".join(notes),
            usage=usage,
            paraphrases=paraphrases,
        )
