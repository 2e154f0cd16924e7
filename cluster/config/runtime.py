"""Where the processes run: the Ray cluster and the local embedded sidecars."""

from __future__ import annotations

from pydantic import Field

from cluster.config.base import Section

# what fsspec's S3 filesystem reads (`ragc ingest s3://...`): the Ray Data tasks that read bodies need them too
OBJECT_STORE_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
)


class RayConfig(Section):
    address: str | None = Field(
        default=None, description="existing Ray cluster (`auto`, `ray://...`); unset = an ephemeral local one"
    )
    num_cpus: int | None = Field(default=None, ge=1, description="CPUs of the local Ray instance")
    object_store_memory_mb: int = Field(default=512, ge=64)
    metrics_export_port: int | None = Field(
        default=None,
        gt=0,
        lt=65536,
        description="where a local Ray instance's metrics agent serves Prometheus metrics; unset = a free port "
        "Ray picks (the local cluster's app host uses `local.metrics_port`)",
    )
    forward_env: list[str] = Field(
        default_factory=lambda: list(OBJECT_STORE_ENV),
        description="environment variables (names; values from this process, only those set) given to this job's "
        "workers when it joins a running cluster, e.g. an object-store source's credentials; a local Ray's "
        "workers inherit the whole environment",
    )


class LocalConfig(Section):
    host: str = Field(default="127.0.0.1", description="loopback: the local cluster is never exposed")
    milvus_port: int = Field(default=19530, gt=0, lt=65536)
    redis_port: int = Field(default=6380, gt=0, lt=65536)
    http_port: int = Field(default=8000, gt=0, lt=65536)
    metrics_port: int = Field(
        default=8090, gt=0, lt=65536, description="Prometheus metrics of every Serve replica (`ragc up`'s Ray)"
    )
    start_timeout_s: float = Field(default=120.0, gt=0)
    nodes: int = Field(
        default=0,
        ge=0,
        description="worker nodes of the app host's Ray on this machine, beside a head that only coordinates "
        "(`ragc up --nodes N`); 0 = one local node",
    )
    cpus_per_node: int = Field(default=2, ge=1, description="logical CPUs of each worker node when `nodes` > 0")
