from pathlib import Path

import pytest
from pydantic import ValidationError

from cluster.config import RagcConfig, load_config


def test_defaults_are_valid_and_local() -> None:
    cfg = RagcConfig()
    assert cfg.milvus.uri is None
    assert cfg.local.host == "127.0.0.1"
    assert cfg.embedding.dim == 384


def test_env_overrides_nest_and_keep_types() -> None:
    cfg = load_config(
        None,
        environ={
            "RAGC_STATE_DIR": "/x",
            "RAGC_EMBEDDING__BATCH_SIZE": "64",
            "RAGC_REDIS__ENABLED": "false",
            "RAGC_REDIS__URL": "null",
            "RAGC_SERVE__DEPLOYMENTS__RERANK__MAX_REPLICAS": "3",
            "RAGC_SERVE__FAULTS__FAIL": '["dense"]',
            "RAGC_LOADTEST_PROFILE": "smoke",  # another tool's variable with our prefix: not a config key
            "OTHER": "1",
        },
    )
    assert (str(cfg.state_dir), cfg.embedding.batch_size, cfg.redis.enabled, cfg.redis.url) == ("/x", 64, False, None)
    assert cfg.serve.deployments["rerank"].max_replicas == 3
    assert cfg.serve.deployments["ingress"] == RagcConfig().serve.deployments["ingress"], "one key, not the section"
    assert cfg.serve.faults.fail == ["dense"]


def test_an_unknown_nested_env_key_is_refused() -> None:
    with pytest.raises(ValidationError, match="urii"):
        load_config(None, environ={"RAGC_MILVUS__URII": "http://a:1"})


def test_the_file_is_named_by_ragc_config_and_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("milvus:\n  uri: http://b:2\n")
    assert load_config(None, environ={"RAGC_CONFIG": str(path)}).milvus.uri == "http://b:2"
    path.write_text("- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_config(path, environ={})


def test_file_then_env(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("milvus:\n  uri: http://a:1\nembedding:\n  batch_size: 8\n")
    cfg = load_config(path, environ={"RAGC_EMBEDDING__BATCH_SIZE": "16"})
    assert cfg.milvus.uri == "http://a:1"
    assert cfg.embedding.batch_size == 16


def test_unknown_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("milvus:\n  urii: http://a:1\n")
    with pytest.raises(ValidationError, match="urii"):
        load_config(path, environ={})


def test_overlap_must_be_below_size() -> None:
    with pytest.raises(ValidationError, match="chunk_overlap"):
        RagcConfig.model_validate({"chunking": {"chunk_size": 64, "chunk_overlap": 64}})


def test_secret_ref_reads_env_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.config import SecretRef

    monkeypatch.setenv("MY_TOKEN", "s3cret")
    assert SecretRef(env_var="MY_TOKEN").resolve() == "s3cret"
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    assert SecretRef(file=secret).resolve() == "from-file"
    assert SecretRef().resolve() is None


def test_a_packaged_embedding_model_brings_its_id_and_width() -> None:
    cfg = load_config(None, environ={"RAGC_EMBEDDING__MODEL": "packaged:all-mpnet-base-v2"})
    assert (cfg.embedding.model_id, cfg.embedding.dim) == ("sentence-transformers/all-mpnet-base-v2", 768)
    default = RagcConfig().embedding
    assert (default.model_id, default.dim) == ("sentence-transformers/all-MiniLM-L6-v2", 384)
    stated = load_config(
        None, environ={"RAGC_EMBEDDING__MODEL": "packaged:all-mpnet-base-v2", "RAGC_EMBEDDING__DIM": "768"}
    )
    assert stated.embedding == cfg.embedding, "naming the same width again is fine"


def test_a_packaged_embedding_model_under_another_id_or_width_is_refused() -> None:
    with pytest.raises(ValidationError, match="all-mpnet-base-v2 has dim 768, not 384"):
        load_config(None, environ={"RAGC_EMBEDDING__MODEL": "packaged:all-mpnet-base-v2", "RAGC_EMBEDDING__DIM": "384"})
    with pytest.raises(ValidationError, match="has model_id 'sentence-transformers/all-MiniLM-L6-v2'"):
        load_config(None, environ={"RAGC_EMBEDDING__MODEL_ID": "mine/minilm"})
    local = load_config(None, environ={"RAGC_EMBEDDING__MODEL": "/models/mine", "RAGC_EMBEDDING__MODEL_ID": "mine/x"})
    assert (local.embedding.model_id, local.embedding.dim) == ("mine/x", 384), "a local model names its own"
