"""One config tree for every knob, split by layer: `base` (shared pieces), `store`, `embedding`, `ingest`,
`runtime`, `serve`, `training`, and `tree` (the whole tree and its loader). Import from here."""

from cluster.config.base import (
    DEFAULT_COLLECTION_ALIAS,
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_STATE_DIR,
    ENV_NESTING,
    ENV_PREFIX,
    SecretRef,
    Section,
)
from cluster.config.embedding import ChunkingConfig, EmbeddingConfig
from cluster.config.ingest import IngestConfig, IngestFaults
from cluster.config.runtime import LocalConfig, RayConfig
from cluster.config.serve import (
    EQUALITY_OPS,
    STAGES,
    AnswerabilityConfig,
    AuthConfig,
    CacheConfig,
    DeploymentConfig,
    FilterField,
    FilterOp,
    LimitsConfig,
    LLMConfig,
    LLMEngineConfig,
    RerankConfig,
    RetrieveConfig,
    RewriteConfig,
    ServeConfig,
    StageFaults,
    SynthesizeConfig,
)
from cluster.config.store import MilvusConfig, RedisConfig
from cluster.config.training import RerankTrainingConfig
from cluster.config.tree import CONFIG_FILE_VAR, RagcConfig, load_config

__all__ = [
    "CONFIG_FILE_VAR",
    "DEFAULT_COLLECTION_ALIAS",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_STATE_DIR",
    "ENV_NESTING",
    "ENV_PREFIX",
    "EQUALITY_OPS",
    "STAGES",
    "AnswerabilityConfig",
    "AuthConfig",
    "CacheConfig",
    "ChunkingConfig",
    "DeploymentConfig",
    "EmbeddingConfig",
    "FilterField",
    "FilterOp",
    "IngestConfig",
    "IngestFaults",
    "LLMConfig",
    "LLMEngineConfig",
    "LimitsConfig",
    "LocalConfig",
    "MilvusConfig",
    "RagcConfig",
    "RayConfig",
    "RedisConfig",
    "RerankConfig",
    "RerankTrainingConfig",
    "RetrieveConfig",
    "RewriteConfig",
    "SecretRef",
    "Section",
    "ServeConfig",
    "StageFaults",
    "SynthesizeConfig",
    "load_config",
]
