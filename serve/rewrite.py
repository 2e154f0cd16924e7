"""Query rewrite (conversation -> one self-contained query) and HyDE. Until an LLM backend is
configured the stage passes the query through and says `skipped`."""

from __future__ import annotations

import asyncio
from typing import Any

from cluster.config import RagcConfig
from serve.types import RewriteResult


class RewriteStage:
    def __init__(self, config: dict[str, Any]) -> None:
        cfg = RagcConfig.model_validate(config)
        self._delay_s = cfg.serve.faults.delay_s.get("rewrite", 0.0)

    async def rewrite(self, query: str, history: list[dict[str, str]], rewrite: bool, hyde: bool) -> RewriteResult:
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        return RewriteResult(query=query, status="skipped", detail="no LLM backend configured")

    def check_health(self) -> None:
        return None
