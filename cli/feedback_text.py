"""`ragc feedback` as text: the tally, then one line per rated answer with what was asked and answered."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cli.inventory_text import columns

SHOWN_CHARS = 60


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SHOWN_CHARS else flat[: SHOWN_CHARS - 1] + "…"


def _served(receipt: dict[str, Any]) -> str:
    status = receipt["synthesize"]
    if receipt["abstained"]:
        return "abstained"
    if status == "skipped":  # the no_text mode: retrieval only
        return "passages only"
    if status == "fallback":
        return "fallback"
    return "grounded" if receipt["grounded"] else "ungrounded"


def feedback_text(payload: dict[str, Any]) -> str:
    counts = payload["ratings"]
    lines = [
        f"tenant {payload['tenant']}"
        + (f" since {payload['since'][:16].replace('T', ' ')} UTC" if payload.get("since") else "")
        + f": {payload['rated']} rated answers, {counts['up']} up, {counts['down']} down"
        + (f" ({payload['revised']} ratings revised)" if payload["revised"] else "")
    ]
    if payload["feedback"]:
        rows = [["RATED (UTC)", "RATING", "REQUEST", "SERVED", "CITED", "QUESTION", "COMMENT"]]
        for entry in payload["feedback"]:
            receipt = entry["receipt"]
            rows.append(
                [
                    datetime.fromtimestamp(entry["at"], UTC).strftime("%Y-%m-%d %H:%M"),
                    entry["rating"],
                    entry["request_id"],
                    _served(receipt),
                    ",".join(sorted({c["doc_id"] for c in receipt["cited"]})),
                    _short(receipt["question"]),
                    _short(entry["comment"]),
                ]
            )
        lines += columns(rows)
    return "\n".join(lines)
