"""Answer synthesis. The extractive answer - the passages' best sentences, each cited [n] - is the
stage's behaviour without an LLM and the ingress's fallback when synthesis times out or fails."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from cluster.config import RagcConfig, SynthesizeConfig
from serve.types import Passage, Synthesis

CITATION = re.compile(r"\[(\d+)\]")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = (
    "a an and are as at be by do does for from how i in is it of on or the to what when where which who why with"
)
STOPWORDS = frozenset(_STOPWORDS.split(" "))


def terms(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1}


def best_excerpt(query: str, text: str, max_chars: int) -> str:
    """The passage's sentences that share most words with the query, in their original order."""
    prose = " ".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    sentences = [s.strip() for s in SENTENCE_END.split(" ".join(prose.split())) if s.strip()]
    if not sentences:
        return ""
    wanted = terms(query)
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(terms(sentences[i]) & wanted), i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        if used and used + len(sentences[i]) > max_chars:
            continue
        chosen.append(i)
        used += len(sentences[i]) + 1
        if used >= max_chars:
            break
    excerpt = " ".join(sentences[i] for i in sorted(chosen))
    return excerpt if len(excerpt) <= max_chars else excerpt[: max_chars - 1].rsplit(" ", 1)[0] + "…"


def extractive_answer(query: str, passages: list[Passage], cfg: SynthesizeConfig) -> Synthesis:
    parts = []
    cited = []
    for n, passage in enumerate(passages[: cfg.extractive_passages], start=1):
        excerpt = best_excerpt(query, passage.text, cfg.extractive_chars)
        if excerpt:
            parts.append(f"{excerpt} [{n}]")
            cited.append(n)
    return Synthesis(answer="\n\n".join(parts), cited=cited, grounded=bool(cited), mode="extractive")


def validate_citations(answer: str, passages_sent: int) -> tuple[str, list[int], int]:
    """Keep citations that point at a passage actually sent; remove the rest and count them."""
    removed = 0

    def check(match: re.Match[str]) -> str:
        nonlocal removed
        n = int(match.group(1))
        if 1 <= n <= passages_sent:
            return match.group(0)
        removed += 1
        return ""

    cleaned = CITATION.sub(check, answer)
    cited = sorted({int(m) for m in CITATION.findall(cleaned)})
    return cleaned, cited, removed


class SynthesizeStage:
    def __init__(self, config: dict[str, Any]) -> None:
        cfg = RagcConfig.model_validate(config)
        self._cfg = cfg.serve.synthesize
        self._delay_s = cfg.serve.faults.delay_s.get("synthesize", 0.0)

    async def synthesize(self, query: str, passages: list[Passage]) -> Synthesis:
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        return extractive_answer(query, passages, self._cfg)

    def check_health(self) -> None:
        return None
