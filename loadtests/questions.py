"""Where load-test questions come from: a labelled set (BEIR `queries.jsonl`, e.g. SciFact) and questions
about the bundled demo corpus, plus paraphrases, conversations and filters built from them."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LABELLED = ROOT.parent / "shared" / "data" / "scifact" / "queries.jsonl"
DEMO_QUESTIONS = (
    "How are tenants kept apart?",
    "What happens when a document is edited?",
    "How does hybrid retrieval work?",
    "What does the response cache key contain?",
    "When does the service abstain?",
    "How is a reindex rolled out?",
    "What happens when Redis is down?",
    "How are filters validated?",
)
FOLLOW_UPS = ("Why is that?", "How is it configured?", "What happens when it fails?")
PARAPHRASES = ("Is it true that {q}?", "{q} - what does the evidence say?", "Tell me: {q}")
FILTERS = ({"doc_type": "md"}, {"year": {"gte": 2000}}, {"doc_type": {"in": ["md", "txt"]}})


def labelled_questions(limit: int = 300) -> list[str]:
    path = Path(os.environ.get("RAGC_LOADTEST_QUESTIONS", DEFAULT_LABELLED))
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            text = json.loads(line).get("text", "").strip()
            if text:
                out.append(text)
            if len(out) >= limit:
                break
    return out


def paraphrase(question: str, n: int) -> str:
    return PARAPHRASES[n % len(PARAPHRASES)].format(q=question.rstrip(".?! "))


def api_keys() -> dict[str, str]:
    """`RAGC_LOADTEST_KEYS`: a JSON object {api_key: tenant}, inline or in a file; unset = auth off."""
    raw = os.environ.get("RAGC_LOADTEST_KEYS", "").strip()
    if not raw:
        return {}
    if not raw.startswith("{"):
        raw = Path(raw).read_text(encoding="utf-8")
    keys = json.loads(raw)
    if not isinstance(keys, dict) or not keys:
        raise ValueError("RAGC_LOADTEST_KEYS must be a non-empty JSON object {api_key: tenant}")
    return {str(k): str(v) for k, v in keys.items()}
