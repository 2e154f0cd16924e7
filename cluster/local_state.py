"""The local cluster's state file: which processes `ragc up` started, on which ports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STATE_FILE = "cluster.json"


def state_path(state_dir: Path) -> Path:
    return state_dir / "run" / STATE_FILE


def read_state(state_dir: Path) -> dict[str, Any]:
    path = state_path(state_dir)
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write_state(state_dir: Path, state: dict[str, Any]) -> None:
    path = state_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2), encoding="utf-8")
    tmp.replace(path)
