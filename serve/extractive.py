"""The extractive answer: the best sentences of the top passages, cited. Synthesis falls back to it and the
pipeline serves it when the LLM stage is off or failed."""

from __future__ import annotations

import re

from cluster.config import SynthesizeConfig
from serve.text_terms import terms
from serve.types import Passage, Synthesis

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# a source's own reference markers ("[14]", "[3, 5]", "[2-4]"): quoted as they are they would read as our citations
SOURCE_MARKER = re.compile(r"\s*\[\d+(?:\s*[,\u2013-]\s*\d+)*\]")


def best_excerpt(query: str, text: str, max_chars: int, title: str = "") -> str:
    """The passage's sentences that share most words with the query, in their original order. Headings
    (markdown, or a line that is the passage's title) are not sentences."""
    heading = " ".join(title.split())
    prose = " ".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#") and " ".join(line.split()) != heading
    )
    prose = SOURCE_MARKER.sub("", prose)
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
    parts: list[str] = []
    cited = []
    for n, passage in enumerate(passages[: cfg.extractive_passages], start=1):
        excerpt = best_excerpt(query, passage.text, cfg.extractive_chars, passage.title)
        if excerpt and not any(excerpt in part for part in parts):  # overlapping chunks quote the same sentences
            parts.append(f"{excerpt} [{n}]")
            cited.append(n)
    return Synthesis(answer="\n\n".join(parts), cited=cited, grounded=bool(cited), mode="extractive")
