"""The local Ray start is tried again (up to three starts) when Ray itself timed out starting, and only then."""

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from cluster.config import RagcConfig
from cluster.ray_runtime import ensure_ray


class FlakyInit:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0
        self.shutdowns = 0
        self.kwargs: dict[str, Any] = {}

    def init(self, **kwargs: Any) -> None:
        self.calls += 1
        self.kwargs = kwargs
        if self.failures:
            raise self.failures.pop(0)

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> Any:
    import ray

    def install(failures: list[Exception]) -> FlakyInit:
        fake = FlakyInit(failures)
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray, "init", fake.init)
        monkeypatch.setattr(ray, "shutdown", fake.shutdown)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        return fake

    return install


@pytest.mark.parametrize(
    "message",
    [
        "The current node timed out during startup.",
        "Timed out waiting for file /tmp/ray/session_x/gcs_server_port_abc",  # seen in CI on 2 busy cores
    ],
)
def test_a_start_that_timed_out_is_tried_again(flaky: Any, message: str) -> None:
    fake = flaky([Exception(message), Exception(message)])
    ensure_ray(RagcConfig())
    assert (fake.calls, fake.shutdowns) == (3, 2)


def test_any_other_failure_or_a_third_timeout_is_raised(flaky: Any) -> None:
    other = flaky([ValueError("bad address")])
    with pytest.raises(ValueError, match="bad address"):
        ensure_ray(RagcConfig())
    assert other.calls == 1
    thrice = flaky([Exception(f"Timed out waiting for file {n}") for n in "abc"])
    with pytest.raises(Exception, match="file c"):
        ensure_ray(RagcConfig())
    assert thrice.calls == 3


def test_joining_a_cluster_gives_its_workers_only_the_configured_variables_that_are_set(
    flaky: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.setenv("UNRELATED_SECRET", "x")
    fake = flaky([])
    ensure_ray(RagcConfig.model_validate({"ray": {"address": "auto"}}))
    assert fake.kwargs["runtime_env"] == {
        "env_vars": {"AWS_ACCESS_KEY_ID": "id", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    }
    nothing = flaky([])
    ensure_ray(RagcConfig.model_validate({"ray": {"address": "auto", "forward_env": []}}))
    assert nothing.kwargs["runtime_env"] is None


NO_TIME_TO_START = """
import json, sys
import psutil
from cluster.config import RagcConfig
from cluster.ray_runtime import ensure_ray
from local.nodes import start_local_nodes
try:
    {start}
except Exception as exc:
    print(exc, file=sys.stderr)
else:
    sys.exit("Ray started")
print(json.dumps([" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]))
"""


@pytest.mark.parametrize(
    "start",
    [
        'ensure_ray(RagcConfig.model_validate({"ray": {"num_cpus": 1}}))',
        "start_local_nodes(1, 1)",  # `ragc up --nodes N`: a head, then its workers
    ],
)
def test_the_processes_of_a_start_that_timed_out_are_stopped(start: str) -> None:
    """For real, in a process of its own: a GCS given no time to write its port file fails every start, as on a
    saturated machine, and each failed start's GCS is stopped rather than left running beside the next one."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_gcs_server_port_wait_time_s": "0"}
    script = NO_TIME_TO_START.format(start=start)
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert "Timed out waiting for file" in run.stderr and "starting it again" in run.stderr, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) == [], "left running after the failed starts"
