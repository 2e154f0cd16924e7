"""The whole tree, and how it is loaded: a YAML file, then `RAGC_`-prefixed environment variables on top.

`RAGC_STATE_DIR=/x` sets `state_dir`; nested keys use a double underscore, e.g.
`RAGC_MILVUS__URI=http://milvus:19530` or `RAGC_EMBEDDING__BATCH_SIZE=64` (lists and mappings as JSON,
`null` for None). Loading is pydantic-settings' (env and YAML sources, deep-merged); the tree stays a plain
model, so building one from a dict (a Serve replica's arguments, a test) never reads the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from cluster.config.base import DEFAULT_STATE_DIR, ENV_NESTING, ENV_PREFIX, Section
from cluster.config.embedding import ChunkingConfig, EmbeddingConfig
from cluster.config.ingest import IngestConfig
from cluster.config.runtime import LocalConfig, RayConfig
from cluster.config.serve import ServeConfig
from cluster.config.store import MilvusConfig, RedisConfig
from cluster.config.training import RerankTrainingConfig

CONFIG_FILE_VAR = ENV_PREFIX + "CONFIG"


class RagcConfig(Section):
    state_dir: Path = Field(default=Path(DEFAULT_STATE_DIR), description="local data, pids and logs")
    milvus: MilvusConfig = Field(default_factory=MilvusConfig)
    redis: RedisConfig = Field(default_factory=RedisConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    chunking: ChunkingConfig = Field(default_factory=ChunkingConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    local: LocalConfig = Field(default_factory=LocalConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    train_reranker: RerankTrainingConfig = Field(default_factory=RerankTrainingConfig)

    @model_validator(mode="after")
    def _enrichment_engine_exists(self) -> RagcConfig:
        enrichment = self.ingest.enrichment
        if enrichment.enabled and enrichment.engine not in self.serve.llm.engines:
            known = ", ".join(sorted(self.serve.llm.engines))
            raise ValueError(f"ingest.enrichment.engine {enrichment.engine!r} is not in serve.llm.engines ({known})")
        return self

    def enrichment_fingerprint(self) -> str:
        """What wrote the chunks' questions and summaries ("" = none), as the collection records it."""
        enrichment = self.ingest.enrichment
        if not enrichment.enabled:
            return ""
        return enrichment.fingerprint(self.serve.llm.engines[enrichment.engine].model)


class _Environment(EnvSettingsSource):
    """The env source over a given mapping (the process environment unless a caller passes its own)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def _settings(path: Path | None, environ: Mapping[str, str]) -> type[BaseSettings]:
    class RagcSettings(BaseSettings, RagcConfig):
        model_config = SettingsConfigDict(
            env_prefix=ENV_PREFIX,
            env_nested_delimiter=ENV_NESTING,
            env_parse_none_str="null",
            extra="forbid",
            yaml_file=path,
        )

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, _Environment(settings_cls, environ), YamlConfigSettingsSource(settings_cls)

    return RagcSettings


def load_config(path: Path | str | None = None, environ: Mapping[str, str] | None = None) -> RagcConfig:
    """File (explicit, else `$RAGC_CONFIG`), then environment overrides on top."""
    environ = os.environ if environ is None else environ
    raw = path or environ.get(CONFIG_FILE_VAR)
    file = Path(raw) if raw else None
    if file is not None:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"config file {file} must hold a mapping at the top level")
    settings = _settings(file, environ)()
    return RagcConfig.model_validate(settings.model_dump())
