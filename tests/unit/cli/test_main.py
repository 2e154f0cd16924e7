"""`ragc` usage errors, in-process: a clear message on stderr and exit code 2, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import EXIT_UNREACHABLE, EXIT_USAGE, main


@pytest.fixture
def dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAGC_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "t", "text": "aspirin"}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "does aspirin help?"}) + "\n")
    for split in ("train", "test"):
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


@pytest.fixture
def unreachable_milvus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Milvus configured at a port nothing listens on, tried once; the port."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("RAGC_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RAGC_MILVUS__URI", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("RAGC_MILVUS__CONNECT_ATTEMPTS", "1")
    monkeypatch.setenv("RAGC_MILVUS__CONNECT_TIMEOUT_S", "1")
    return int(port)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "--dataset", "{missing}"], "no queries.jsonl"),
        (["eval", "--dataset", "{dataset}", "--pipeline", "magic"], "unknown pipeline"),
        (["eval", "--dataset", "{dataset}", "--split", "dev"], "no qrels for split 'dev'"),
        (["train-reranker", "--dataset", "{dataset}", "--split", "test", "--out", "{out}"], "held out"),
        (["calibrate-abstention", "--dataset", "{dataset}"], "pass --reranker"),
        (["calibrate-abstention", "--dataset", "{dataset}", "--reranker", "{out}", "--split", "test"], "held out"),
        (["calibrate-abstention", "--dataset", "{dataset}", "--reranker", "{out}"], "make an abstention variant"),
        (["reindex", "--rollback", "--tenant", "t", "{dataset}"], "--rollback takes no --tenant"),
        (["delete", "--tenant", "a b"], "invalid tenant id 'a b'"),
        (["docs", "--tenant", "a b"], "invalid tenant id 'a b'"),
        (["docs", "--source", "wiki"], "give --tenant too"),
        (["eval-answers", "--dataset", "{dataset}", "--dataset", "{dataset}"], "names a dataset twice"),
        (["eval-answers", "--dataset", "{dataset}", "--dataset", "{out}", "--output", "{out}.json"], "must hold"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(
    argv: list[str], message: str, dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = {"missing": str(tmp_path / "nope"), "dataset": str(dataset), "out": str(tmp_path / "out")}
    assert main([arg.format(**paths) for arg in argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err
    assert not (tmp_path / "state" / "run").exists(), "nothing was started"


def test_a_bad_config_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("serve:\n  default_top_k: many\n")
    assert main(["status", "--config", str(config)]) == EXIT_USAGE
    assert "bad configuration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "policy"),
    [
        (["train-reranker", "--dataset", "{dataset}", "--split", "test", "--out", "{out}"], "PASSIVE"),
        (["calibrate-abstention", "--dataset", "{dataset}", "--reranker", "{out}", "--split", "test"], "PASSIVE"),
        (["eval", "--dataset", "{dataset}", "--pipeline", "magic"], "PASSIVE"),
        (["reindex", "--rollback", "--tenant", "t", "{dataset}"], None),  # a job on the cluster, not in-process
    ],
)
def test_in_process_batch_commands_set_the_openmp_wait_policy_before_torch_loads(
    argv: list[str], policy: str | None, dataset: Path, tmp_path: Path
) -> None:
    """A fresh interpreter, as `ragc` starts: the policy is read once, when torch loads its OpenMP runtime."""
    import os
    import subprocess
    import sys

    args = [arg.format(dataset=dataset, out=tmp_path / "out") for arg in argv]
    probe = (
        "import json, os, sys; from cli.main import main; main(json.loads(sys.argv[1])); "
        "print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(args)], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [policy, False]


@pytest.mark.parametrize("argv", [["docs"], ["delete", "--tenant", "acme"]])
def test_an_unreachable_milvus_is_named_with_what_to_do_not_a_traceback(
    argv: list[str], unreachable_milvus: int, capsys: pytest.CaptureFixture[str]
) -> None:
    port = unreachable_milvus
    assert main(argv) == EXIT_UNREACHABLE
    err = capsys.readouterr().err
    assert f"Milvus at http://127.0.0.1:{port} is unreachable" in err and "`ragc up`" in err
    assert "Traceback" not in err


def test_status_says_what_it_finds_of_the_index_and_fails_on_none_of_it(
    unreachable_milvus: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ragc status` with Milvus configured but unreachable: the index line says so, the JSON has the reason."""
    from cli.main import index_line

    main(["status", "--json"])
    assert "unreachable" in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["index"]

    served = {"collection": "ragc_g2", "alias": "ragc", "index_version": 7, "documents": 33, "chunks": 75}
    assert (
        index_line(served | {"missing_fields": []})
        == "index: ragc_g2 serving 'ragc', version 7: 33 documents, 75 chunks"
    )
    assert index_line(served | {"missing_fields": ["author", "access"]}).endswith(
        "75 chunks; built before author, access were stored: `ragc reindex` adds them"
    )
    assert index_line({"collection": None, "alias": "ragc"}).startswith("index: empty (nothing ingested into 'ragc'")
    assert index_line(None) == "index: milvus is not running"
