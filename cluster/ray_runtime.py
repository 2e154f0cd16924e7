"""Ray bootstrap: join the configured cluster, or start an ephemeral local one for this process."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from typing import TypeVar

import psutil

from cluster.config import RagcConfig

MB = 1024 * 1024
T = TypeVar("T")
LOCAL_START_ATTEMPTS = 3  # the raylet's 30 s registration wait is fixed in Ray; a busy machine may need another try
# what Ray raises when its raylet never registers, or its GCS never wrote its port within the wait
START_TIMEOUTS = ("timed out during startup", "Timed out waiting for file")
GCS_PORT_WAIT_S = "60"  # Ray's default is 30 s: a GCS starting beside milvus-lite on 2 busy cores ran past it
NODE_LABEL = "ragc.io/node"  # a node's name on a local multi-node cluster (`ragc up --nodes N`)


def ensure_ray(cfg: RagcConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", GCS_PORT_WAIT_S)
    address = cfg.ray.address or os.environ.get("RAY_ADDRESS")
    if address:
        # a running cluster's workers have their own environment: this job's get the configured variables
        forwarded = {name: os.environ[name] for name in cfg.ray.forward_env if name in os.environ}
        runtime_env = {"env_vars": forwarded} if forwarded else None
        ray.init(address=address, logging_level=logging.WARNING, runtime_env=runtime_env)
        return
    started_with_retries(
        lambda: ray.init(
            address="local",
            num_cpus=cfg.ray.num_cpus or os.cpu_count(),
            include_dashboard=False,
            object_store_memory=cfg.ray.object_store_memory_mb * MB,
            logging_level=logging.WARNING,
            log_to_driver=False,
            _metrics_export_port=cfg.ray.metrics_export_port,
        ),
        "local Ray",
        after_failure=ray.shutdown,
    )
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = True


def started_with_retries(start: Callable[[], T], what: str, after_failure: Callable[[], object] | None = None) -> T:
    """`start()` (a local Ray process group: a session, a head or a worker node), tried again when its GCS or
    raylet does not come up in time. Each failed try's processes are killed; `after_failure` runs after them."""
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            with ray_processes_reaped_on_failure():
                return start()
        except Exception as exc:  # Ray raises a bare Exception when its raylet or GCS does not come up
            if not any(t in str(exc) for t in START_TIMEOUTS) or attempt == LOCAL_START_ATTEMPTS:
                raise
            # seen on a busy 2-core machine: the raylet never registered, or the GCS never wrote its port (CI,
            # 2026-12-02, the first command of the integration tier; 2026-12-06, a multinode test's worker)
            logging.getLogger(__name__).warning("%s did not start (%s); starting it again", what, exc)
            if after_failure:
                after_failure()
    raise AssertionError("unreachable")


@contextmanager
def ray_processes_reaped_on_failure() -> Iterator[None]:
    """Around a start of local Ray processes: when it fails, kill the Ray processes it left running. A node
    whose GCS did not write its port in time keeps that GCS (and whatever else had started) alive, and the node
    object that would stop it is never returned: every retry of a busy machine's start would add one, until this
    process exits."""
    before = {child.pid for child in psutil.Process().children()}
    try:
        yield
    except BaseException:
        reaped = reap_ray_processes(before)
        if reaped:
            logging.getLogger(__name__).warning("stopped %d Ray processes a failed start left running", reaped)
        raise


def reap_ray_processes(before: Collection[int]) -> int:
    """Kill this process's children that run Ray's code (its binaries, scripts and workers), with their own
    children, except those in `before`; how many."""
    import ray

    home = os.path.dirname(ray.__file__)
    doomed: list[psutil.Process] = []
    for child in psutil.Process().children():
        with suppress(psutil.Error):
            if child.pid not in before and any(home in part for part in child.cmdline()):
                doomed += [*child.children(recursive=True), child]
    for process in doomed:
        with suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(doomed, timeout=10)
    return len(doomed)


def node_name() -> str:
    """The Ray node this worker runs on: its `ragc.io/node` label, else the start of its id."""
    import ray

    context = ray.get_runtime_context()
    label = context.get_node_labels().get(NODE_LABEL)
    return str(label) if label else context.get_node_id()[:12]
