"""What a trained reranker was checked on: each `ragc eval` that ran the hybrid pipeline beside a rerank
pipeline with one of our trained rerankers (its folder holds `ragc_training.json`) adds its figures to
`ragc_checks.json` in that folder, one entry per dataset and split (a newer run replaces the older). A
reranker trained on one corpus can lower quality on another; this record is what an operator reads before
turning it on for a tenant (`serve.rerank.tenants`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cluster.models import resolve_model_path

CHECKS_FILE = "ragc_checks.json"
TRAINING_RECORD = "ragc_training.json"
FIGURES = ("ndcg@10", "recall@100", "reranked_share")  # the share only where the reranker records a domain


def check_entry(result: dict[str, Any], history_user_turns: int) -> dict[str, Any] | None:
    """The entry for one evaluation, or None without both the hybrid and a rerank pipeline."""
    pipelines: dict[str, dict[str, Any]] = result.get("pipelines", {})
    reranked = [name for name in pipelines if name.startswith("hybrid_rerank")]
    if "hybrid" not in pipelines or not reranked:
        return None
    base = pipelines["hybrid"]["ndcg@10"]
    return {
        "dataset": result["dataset"],
        "split": result["split"],
        "queries": result["queries"],
        "history_user_turns": history_user_turns,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pipelines": {
            name: {k: pipelines[name][k] for k in FIGURES if k in pipelines[name]} for name in ["hybrid", *reranked]
        },
        "ndcg@10_lift": {name: round(pipelines[name]["ndcg@10"] - base, 4) for name in reranked},
    }


def record_check(reranker: str, entry: dict[str, Any]) -> Path | None:
    """Adds `entry` to the reranker's checks; None when it is not one of ours (a packaged or hub model)."""
    root = Path(resolve_model_path(reranker))
    if not (root / TRAINING_RECORD).is_file():
        return None
    path = root / CHECKS_FILE
    checks = json.loads(path.read_text(encoding="utf-8"))["checks"] if path.exists() else []
    same = (entry["dataset"], entry["split"])
    checks = [c for c in checks if (c["dataset"], c["split"]) != same] + [entry]
    path.write_text(json.dumps({"checks": checks}, indent=2) + "\n", encoding="utf-8")
    return path
