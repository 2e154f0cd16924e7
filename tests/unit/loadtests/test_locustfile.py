"""The locustfile as Locust loads it: each profile's users, and nothing Locust would refuse. In a subprocess:
Locust monkey-patches the standard library (gevent) when imported, which it must be first to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import json
from locust.env import Environment
from locust.util.load_locustfile import load_locustfile
user_classes, _ = load_locustfile("loadtests/locustfile.py")
Environment(user_classes=list(user_classes.values()))  # Locust's own checks (it refused two of one name)
print(json.dumps(sorted(user_classes)))
"""


@pytest.mark.parametrize(
    ("profile", "users"), [("smoke", ["RagClient"]), ("chat", ["ChatClient"]), ("limits", ["ChatClient", "RagClient"])]
)
def test_each_profile_runs_its_users(profile: str, users: list[str]) -> None:
    env = {**os.environ, "RAGC_LOADTEST_PROFILE": profile}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == users
