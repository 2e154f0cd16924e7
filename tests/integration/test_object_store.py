"""`ragc ingest s3://bucket/prefix` against a real S3 server (moto's, on loopback, in this process), through the
CLI as a user runs it: credentials only from the standard AWS variables, a no-change sync that lists the bucket
and downloads no body, an edit and a delete picked up from the listing."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.config import RagcConfig
from tests.integration.test_ingest import cli_env, ragc_ingest, rows_of

pytestmark = pytest.mark.integration

BUCKET = "ragc-docs"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "test-key",
    "AWS_SECRET_ACCESS_KEY": "test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class RequestLog(logging.Handler):
    """The S3 server's access log (werkzeug's): which objects were downloaded."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def body_reads(self) -> list[str]:
        """GETs of one object (listings are GETs of the bucket with a query string)."""
        return [m[1] for line in self.lines if (m := re.search(rf'"GET /{BUCKET}/([^ ?]+) HTTP', line))]


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    log = RequestLog()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.addHandler(log)
    werkzeug.setLevel(logging.INFO)
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], **_boto_credentials())
    client.create_bucket(Bucket=BUCKET)
    yield {"env": env, "client": client, "log": log}
    werkzeug.removeHandler(log)
    server.stop()


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
    }


def ingest(cfg: RagcConfig, s3: dict[str, Any], state: Path, *args: str) -> dict[str, Any]:
    # the session's Ray: its workers get the AWS variables through the job's runtime env (ray.forward_env)
    env = {k: v for k, v in cli_env(cfg, state).items() if not k.startswith("AWS_")} | s3["env"]
    proc = ragc_ingest(env, f"s3://{BUCKET}/handbook", *args)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_bucket_is_synced_by_its_listing_and_only_new_or_changed_objects_are_read(
    cfg: RagcConfig, s3: dict[str, Any], tmp_path: Path
) -> None:
    put = s3["client"].put_object
    put(Bucket=BUCKET, Key="handbook/tenancy.md", Body=b"# Tenancy\n\nEvery chunk carries its tenant id.\n")
    put(Bucket=BUCKET, Key="handbook/edits.txt", Body=b"An edited document is embedded again, nothing else.")
    put(Bucket=BUCKET, Key="handbook/edits.txt.meta.json", Body=b'{"year": 2023}')
    put(Bucket=BUCKET, Key="handbook/old.md", Body=b"# Old\n\nThis page is about to be removed.\n")
    put(Bucket=BUCKET, Key="elsewhere/other.md", Body=b"# Not under the prefix\n")
    log: RequestLog = s3["log"]

    first = ingest(cfg, s3, tmp_path / "s")
    assert (first["added"], first["failed"], first["listed"], first["read"]) == (3, 0, 3, 3), first
    assert sorted(log.body_reads()) == sorted(
        ["handbook/tenancy.md", "handbook/edits.txt", "handbook/edits.txt.meta.json", "handbook/old.md"]
    )
    assert {r["doc_id"] for r in rows_of(cfg, "acme")} == {"tenancy.md", "edits.txt", "old.md"}
    years = {r["doc_id"]: r["year"] for r in connect_rows(cfg)}
    assert years["edits.txt"] == 2023, "the sidecar object's metadata reached the chunks"

    log.lines.clear()
    unchanged = ingest(cfg, s3, tmp_path / "s")
    assert (unchanged["unchanged"], unchanged["read"], unchanged["chunks_embedded"]) == (3, 0, 0), unchanged
    assert log.body_reads() == [], "a sync with nothing changed lists the bucket and downloads nothing"

    log.lines.clear()
    put(Bucket=BUCKET, Key="handbook/edits.txt", Body=b"An edited document is embedded again, and only it.")
    s3["client"].delete_object(Bucket=BUCKET, Key="handbook/old.md")
    pruned = ingest(cfg, s3, tmp_path / "s", "--prune")
    assert (pruned["changed"], pruned["deleted"], pruned["unchanged"], pruned["read"]) == (1, 1, 1, 1), pruned
    assert sorted(log.body_reads()) == ["handbook/edits.txt", "handbook/edits.txt.meta.json"]
    texts = {r["doc_id"]: r["text"] for r in rows_of(cfg, "acme")}
    assert set(texts) == {"tenancy.md", "edits.txt"} and "and only it" in texts["edits.txt"]


def connect_rows(cfg: RagcConfig) -> list[dict[str, Any]]:
    from cluster.store.client import connect
    from cluster.store.expr import eq

    return connect(cfg).query(cfg.milvus.collection, filter=eq("tenant_id", "acme"), output_fields=["doc_id", "year"])
