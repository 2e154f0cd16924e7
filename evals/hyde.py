"""The LLM pipelines' in-process rewrite stage: HyDE for `*_hyde`, paraphrases for `*_multiquery`, each
through the rewrite stage's own path on an in-process LLM engine."""

from __future__ import annotations

import asyncio

from cluster.config import RagcConfig


class InProcessHyde:
    """Counts what it produced: a small model's passage or paraphrases are often refused by the stage's checks."""

    def __init__(self, cfg: RagcConfig) -> None:
        from serve.llm.engine import LLMEngine
        from serve.stages.rewrite import RewriteStage

        self._loop = asyncio.new_event_loop()
        self._engine = LLMEngine(**LLMEngine.tree_args(cfg, cfg.serve.rewrite.engine))
        self._stage = RewriteStage(**RewriteStage.tree_args(cfg), llm=self._engine)
        self.statuses: dict[str, int] = {}
        self.paraphrase_statuses: dict[str, int] = {}

    def __call__(self, query: str) -> str | None:
        result = self._loop.run_until_complete(self._stage.rewrite(query, [], False, True))
        status = "passage" if result.hyde_passage else f"none ({result.status}: {result.detail})"
        self.statuses[status] = self.statuses.get(status, 0) + 1
        return result.hyde_passage

    def paraphrases(self, query: str) -> tuple[str, ...]:
        result = self._loop.run_until_complete(self._stage.rewrite(query, [], False, False, multi_query=True))
        status = f"{len(result.paraphrases)} paraphrase(s)" if result.paraphrases else "none (refused)"
        self.paraphrase_statuses[status] = self.paraphrase_statuses.get(status, 0) + 1
        return tuple(result.paraphrases)

    def close(self) -> None:
        self._engine.shutdown()
        self._loop.close()
