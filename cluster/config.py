"""One config tree for every knob: YAML file + `RAGC_`-prefixed environment overrides.

`RAGC_STATE_DIR=/x` sets `state_dir`; nested keys use a double underscore, e.g.
`RAGC_MILVUS__URI=http://milvus:19530` or `RAGC_EMBEDDING__BATCH_SIZE=64`. Values are parsed as YAML
scalars, so numbers and booleans keep their types.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ENV_PREFIX = "RAGC_"
ENV_NESTING = "__"
DEFAULT_STATE_DIR = ".ragc"
DEFAULT_COLLECTION_ALIAS = "ragc_chunks"
DEFAULT_EMBEDDING_MODEL = "packaged:all-MiniLM-L6-v2"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SecretRef(Section):
    """A credential named by where it lives, never by its value."""

    env_var: str | None = Field(default=None, description="environment variable holding the secret")
    file: Path | None = Field(default=None, description="file holding the secret (e.g. a mounted k8s Secret)")

    def resolve(self) -> str | None:
        if self.env_var and os.environ.get(self.env_var):
            return os.environ[self.env_var]
        if self.file and self.file.exists():
            return self.file.read_text(encoding="utf-8").strip()
        return None


class MilvusConfig(Section):
    uri: str | None = Field(
        default=None, description="Milvus URI; unset means the local milvus-lite sidecar of `ragc up`"
    )
    token: SecretRef = Field(default_factory=SecretRef, description="Milvus token (user:password or API key)")
    db_name: str = Field(default="default", description="Milvus database")
    collection: str = Field(
        default=DEFAULT_COLLECTION_ALIAS,
        description="alias that serving reads through; physical collections are `<alias>_v<N>`",
    )
    meta_collection: str = Field(default="ragc_meta", description="key-value records: index version, sources")
    text_max_chars: int = Field(default=16384, ge=256, le=65535, description="VARCHAR length of chunk text")
    hnsw_m: int = Field(default=16, ge=4, le=64)
    hnsw_ef_construction: int = Field(default=200, ge=8, le=1024)
    bm25_analyzer: dict[str, Any] = Field(
        default_factory=lambda: {"tokenizer": "standard", "filter": ["lowercase"]},
        description="Milvus analyzer params for the BM25 text field (lite supports standard/jieba)",
    )
    bm25_stemmer: str | None = Field(
        default="english",
        description="Snowball stemmer applied to the BM25 copy of each chunk and to queries (Milvus Lite "
        "cannot stem); null indexes plain lower-cased words. Changing it needs `ragc reindex`",
    )
    connect_timeout_s: float = Field(default=10.0, gt=0)
    keepalive_without_calls: bool = Field(
        default=False,
        description="gRPC pings on idle connections; milvus-lite's server answers them with GOAWAY "
        "(too_many_pings), so only turn this on against a real Milvus that permits them",
    )
    keep_old_collections: int = Field(
        default=0, ge=0, description="physical collections kept after a reindex swaps the alias"
    )

    @field_validator("bm25_stemmer")
    @classmethod
    def _known_stemmer(cls, v: str | None) -> str | None:
        from cluster.store.bm25_text import check_stemmer

        return check_stemmer(v) if v else None


class RedisConfig(Section):
    url: str | None = Field(
        default=None, description="Redis URL; unset means the local redis-server sidecar when one is installed"
    )
    password: SecretRef = Field(default_factory=SecretRef)
    enabled: bool = Field(default=True, description="false turns the shared cache layer off")
    socket_timeout_s: float = Field(default=0.25, gt=0, description="a slower Redis is bypassed, not awaited")
    embedding_cache_ttl_s: int = Field(default=30 * 24 * 3600, ge=0, description="0 keeps entries forever")


class EmbeddingConfig(Section):
    model: str = Field(
        default=DEFAULT_EMBEDDING_MODEL,
        description="`packaged:<name>` (weights from a registry package), a local path, or a model id",
    )
    model_id: str = Field(
        default="sentence-transformers/all-MiniLM-L6-v2",
        description="identity recorded with the collection; serving refuses a collection with another one",
    )
    dim: int = Field(default=384, gt=0)
    batch_size: int = Field(default=32, gt=0, le=4096)
    max_seq_length: int = Field(default=256, gt=0)
    normalize: bool = True
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="float32",
        description="weights; auto = bfloat16 where native (CUDA, AMX/AVX512-BF16 CPUs), else float32. bf16 "
        "embeds 2.3x faster on an AMX CPU but cost SciFact hybrid nDCG@10 (0.7031-0.7054 vs 0.7067-0.708 "
        "fp32) and varies run to run with batch composition, so fp32 stays the default",
    )
    num_threads: int = Field(default=0, ge=0, description="torch threads per embedding actor; 0 = all CPUs")


class ChunkingConfig(Section):
    chunk_size: int = Field(default=256, ge=32, le=8192, description="tokens per chunk")
    chunk_overlap: int = Field(default=32, ge=0, description="tokens shared by neighbouring chunks")
    markdown_headers: bool = Field(default=True, description="split markdown on headers first")

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: Any) -> int:
        size = info.data.get("chunk_size", 0)
        if size and v >= size:
            raise ValueError(f"chunk_overlap ({v}) must be smaller than chunk_size ({size})")
        return v

    def fingerprint(self) -> str:
        return f"sentence:{self.chunk_size}:{self.chunk_overlap}:md={int(self.markdown_headers)}"


class IngestFaults(Section):
    """Test-only fault hooks; all off by default."""

    fail_after_batches: int | None = Field(
        default=None, ge=0, description="the Milvus sink raises after this many batches were upserted"
    )


class IngestConfig(Section):
    parse_blocks: int = Field(default=0, ge=0, description="blocks for parse+chunk tasks; 0 = 2 x CPUs")
    embed_batch_rows: int = Field(
        default=512,
        gt=0,
        description="rows per embedding-actor call; the model sorts each call by length, "
        "so larger calls pad less (the model's own batch stays embedding.batch_size)",
    )
    embed_actors_min: int = Field(default=1, ge=1)
    embed_actors_max: int = Field(default=1, ge=1)
    gpus_per_actor: float = Field(default=0.0, ge=0, description="0 = CPU; 1 per actor on GPU nodes")
    upsert_batch_size: int = Field(default=256, gt=0, le=10000)
    max_file_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    faults: IngestFaults = Field(default_factory=IngestFaults)


class RayConfig(Section):
    address: str | None = Field(
        default=None, description="existing Ray cluster (`auto`, `ray://...`); unset = an ephemeral local one"
    )
    num_cpus: int | None = Field(default=None, ge=1, description="CPUs of the local Ray instance")
    object_store_memory_mb: int = Field(default=512, ge=64)


class LocalConfig(Section):
    host: str = Field(default="127.0.0.1", description="loopback: the local cluster is never exposed")
    milvus_port: int = Field(default=19530, gt=0, lt=65536)
    redis_port: int = Field(default=6380, gt=0, lt=65536)
    http_port: int = Field(default=8000, gt=0, lt=65536)
    start_timeout_s: float = Field(default=120.0, gt=0)


STAGES = ("ingress", "rewrite", "retrieve", "rerank", "synthesize")
FilterOp = Literal["eq", "ne", "in", "gte", "lte"]
EQUALITY_OPS: tuple[FilterOp, ...] = ("eq", "ne", "in")


class DeploymentConfig(Section):
    """Ray Serve knobs of one stage; `ragc serve-config` and the Helm chart are generated from these."""

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=2, ge=1)
    target_ongoing_requests: float = Field(default=4.0, gt=0)
    max_ongoing_requests: int = Field(default=16, ge=1)
    max_queued_requests: int = Field(default=64, ge=-1, description="-1 = unbounded; beyond it callers get 503")
    num_cpus: float = Field(default=0.0, ge=0, description="CPUs reserved per replica (0 shares the node)")
    num_gpus: float = Field(default=0.0, ge=0)
    health_check_period_s: float = Field(default=10.0, gt=0)
    health_check_timeout_s: float = Field(default=30.0, gt=0)
    upscale_delay_s: float = Field(default=3.0, ge=0)
    downscale_delay_s: float = Field(default=60.0, ge=0)


def _default_deployments() -> dict[str, DeploymentConfig]:
    return {
        "ingress": DeploymentConfig(
            max_replicas=4, target_ongoing_requests=16, max_ongoing_requests=64, max_queued_requests=256
        ),
        "rewrite": DeploymentConfig(),
        "retrieve": DeploymentConfig(max_replicas=4, target_ongoing_requests=8, max_ongoing_requests=32),
        "rerank": DeploymentConfig(target_ongoing_requests=8, max_ongoing_requests=32),
        "synthesize": DeploymentConfig(),
    }


class FilterField(Section):
    type: Literal["str", "int"] = "str"
    ops: list[FilterOp] = Field(default_factory=lambda: list(EQUALITY_OPS))


def _default_filters() -> dict[str, FilterField]:
    ranged: list[FilterOp] = ["eq", "ne", "in", "gte", "lte"]
    return {
        "doc_id": FilterField(),
        "doc_type": FilterField(),
        "source": FilterField(),
        "title": FilterField(),
        "section": FilterField(),
        "year": FilterField(type="int", ops=ranged),
        "updated_at": FilterField(type="int", ops=ranged),
    }


class AuthConfig(Section):
    enabled: bool = Field(default=True, description="false = single-tenant demo mode, loopback only")
    api_keys: SecretRef = Field(
        default_factory=lambda: SecretRef(env_var="RAGC_API_KEYS"),
        description="a YAML/JSON mapping {api_key: tenant}, in a file or an environment variable",
    )
    single_tenant: str = Field(default="demo", description="the tenant of every request when auth is off")


class LimitsConfig(Section):
    max_query_chars: int = Field(default=2000, gt=0)
    max_history_turns: int = Field(default=20, ge=0)
    max_turn_chars: int = Field(default=4000, gt=0)
    max_top_k: int = Field(default=50, gt=0)
    max_filters: int = Field(default=16, ge=0)
    max_in_values: int = Field(default=100, gt=0)
    max_body_bytes: int = Field(default=256 * 1024, gt=0)


class RetrieveConfig(Section):
    timeout_s: float = Field(default=5.0, gt=0)
    dense_candidates: int = Field(default=50, gt=0, le=1000, description="per-arm candidates, dense")
    bm25_candidates: int = Field(default=50, gt=0, le=1000, description="per-arm candidates, BM25")
    pool_size: int = Field(default=50, gt=0, le=1000, description="fused candidates passed to rerank")
    rrf_k: int = Field(default=60, gt=0)
    similarity_floor: float = Field(
        default=0.30, ge=-1, le=1, description="dense cosine below which a question abstains (see floor_scope)"
    )
    floor_scope: Literal["query", "candidate"] = Field(
        default="query",
        description="query: abstain when no candidate reaches the floor, else keep every candidate (SciFact "
        "test nDCG@10 0.708 vs 0.702); candidate: also drop each candidate below it",
    )
    hnsw_ef: int = Field(default=128, gt=0)
    search_timeout_s: float = Field(
        default=3.0,
        gt=0,
        description="client-side deadline of each Milvus search; when both arms miss it the connection is "
        "rebuilt on the next request, so a restarted Milvus is found again instead of waiting on gRPC backoff",
    )
    index_version_ttl_s: float = Field(default=2.0, ge=0)
    unhealthy_after_s: float = Field(
        default=60.0,
        gt=0,
        description="a replica cut off from Milvus this long fails its health check and is replaced; shorter "
        "outages are ridden out by reconnecting",
    )


class RerankConfig(Section):
    model: str | None = Field(default=None, description="cross-encoder path or id; unset = stage skipped")
    rerank_default: bool = Field(
        default=True,
        description="rerank when the request does not say (the eval gate checks it is the better pipeline)",
    )
    timeout_s: float = Field(default=3.0, gt=0)
    max_length: int | None = Field(default=None, gt=0, description="tokens per pair; unset = the model's own")
    batch_max_size: int = Field(
        default=4,
        gt=0,
        description="requests per cross-encoder call: a batch returns when its last pair is scored, and on CPU "
        "4 x depth pairs already fill the model's batches (bench query, 2 cores: 1.26 QPS / p95 23 s at 4, "
        "1.09 / 31 s at 16)",
    )
    batch_wait_timeout_s: float = Field(default=0.01, ge=0)
    depth: int = Field(default=30, gt=0, description="fused candidates the cross-encoder scores")
    num_threads: int = Field(
        default=0,
        ge=0,
        description="torch threads per rerank replica; 0 = the replica's reserved CPUs, or when it reserves "
        "none, the available cores (affinity, cgroup quota) / max_replicas (one forward pass scales poorly "
        "across threads: on 2 cores two 1-thread replicas score 1.4x the pairs/s of one 2-thread replica)",
    )
    order: Literal["scores", "rrf"] = Field(
        default="rrf",
        description="scores: order by cross-encoder score; rrf: reciprocal-rank fusion of the cross-encoder's "
        "rank with the retrieval rank (a weak reranker then refines the order instead of replacing it)",
    )
    rrf_k: int = Field(default=60, gt=0, description="k of the rank fusion when order is rrf")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="cross-encoder weights; auto = bfloat16 where native (the same order ~1.9x faster on an AMX "
        "CPU), else float32 (emulated bf16 is slower)",
    )


class RerankTrainingConfig(Section):
    """`ragc train-reranker`: fine-tune a cross-encoder on a labelled split, hard negatives from our retriever."""

    base_model: str = Field(default="packaged:all-minilm-l6-v2", description="weights the cross-encoder starts from")
    loss: Literal["listwise", "bce"] = Field(
        default="listwise",
        description="listwise: softmax cross-entropy over one positive and its negatives; bce: pointwise",
    )
    negatives: int = Field(default=7, ge=1, description="hard negatives per positive")
    negative_pool: int = Field(default=30, gt=0, description="hybrid candidates the negatives are drawn from")
    epochs: int = Field(
        default=2,
        ge=1,
        description="passes over the groups (SciFact test, 2 cores: 1 epoch at lr 2e-4 gave hybrid_rerank "
        "0.697-0.733 from run to run, i.e. -0.010 to +0.026 over hybrid; 2 at 1e-4 0.734-0.751 (+0.027 to "
        "+0.043) in 13 min of training; 3 at 1e-4 0.766 in 20 min)",
    )
    groups_per_step: int = Field(default=4, gt=0, description="positives (each with its negatives) per step")
    learning_rate: float = Field(default=1e-4, gt=0)
    warmup_ratio: float = Field(default=0.1, ge=0, lt=1)
    max_length: int = Field(default=128, gt=0, description="tokens of query + passage; saved with the model")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="bfloat16 = bf16 autocast over fp32 master weights; auto = bfloat16 where native (CUDA, "
        "AMX/AVX512-BF16 CPUs), else float32 (emulated bf16 autocast is an order of magnitude slower)",
    )
    average_tail: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="share of the last steps whose weights are averaged into the saved model (0 = the last step's)",
    )
    seed: int = 13
    gpus: float = Field(default=1.0, ge=0, description="GPUs of the Ray task when the cluster has any")


class RewriteConfig(Section):
    timeout_s: float = Field(default=10.0, gt=0, description="rewrite + HyDE together (CPU default; tighten on GPU)")
    rewrite_default: bool = Field(
        default=False,
        description="rewrite follow-ups when the request does not say; off by default because the packaged "
        "SmolLM2-135M rewrites worse than the raw utterance on TREC CAsT (`ragc bench llm`); turn it on "
        "with a real instruct model",
    )
    hyde_default: bool = Field(default=False, description="HyDE when the request does not say")
    engine: str = Field(default="default", description="the `serve.llm.engines` entry that rewrites")
    history_turns: int = Field(default=4, ge=0, description="conversation turns the rewrite sees")
    history_max_chars: int = Field(default=2000, gt=0, description="the most recent turns are kept up to this")
    max_tokens: int = Field(default=48, gt=0)
    max_query_chars: int = Field(default=400, gt=0, description="a longer rewrite is refused")
    hyde_max_tokens: int = Field(default=96, gt=0)
    hyde_include_original: bool = Field(default=True, description="embed the question with the HyDE passage")
    cache_entries: int = Field(default=4096, ge=0, description="per-replica cache of rewrites")
    cache_ttl_s: float = Field(default=3600.0, gt=0)


class SynthesizeConfig(Section):
    timeout_s: float = Field(default=25.0, gt=0, description="whole generation (CPU default; tighten on GPU)")
    engine: str = Field(default="default", description="the `serve.llm.engines` entry that answers")
    max_tokens: int = Field(default=200, gt=0)
    temperature: float = Field(default=0.0, ge=0, le=2)
    passage_max_chars: int = Field(default=900, gt=0, description="characters of each passage in the prompt")
    extractive_passages: int = Field(default=3, gt=0, description="passages quoted by the extractive answer")
    extractive_chars: int = Field(default=400, gt=0, description="characters quoted per passage")


def _llm_deployment() -> DeploymentConfig:
    return DeploymentConfig(max_replicas=1, target_ongoing_requests=8, max_ongoing_requests=32, num_cpus=1.0)


class LLMEngineConfig(Section):
    """One vLLM engine, served by its own deployment `llm_<name>`."""

    model: str = Field(
        default="packaged:smollm2-135m-instruct",
        description="`packaged:<name>` (converted once into the state dir), a local path, or a model id "
        "baked into the image",
    )
    served_name: str | None = Field(default=None, description="name reported in responses; default: model")
    max_model_len: int = Field(default=2048, gt=0)
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = "auto"
    enforce_eager: bool = Field(default=True, description="skip graph capture/compilation (fast start on CPU)")
    max_num_seqs: int = Field(default=16, gt=0, description="sequences batched by the engine")
    kv_cache_gb: float = Field(default=1.0, gt=0, description="CPU only: VLLM_CPU_KVCACHE_SPACE")
    stream_interval: int = Field(
        default=4, ge=1, description="tokens per streamed chunk: fewer, larger messages through Serve"
    )
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1, description="GPU only")
    tensor_parallel_size: int = Field(default=1, ge=1)
    deployment: DeploymentConfig = Field(default_factory=_llm_deployment)


class LLMConfig(Section):
    enabled: bool = Field(
        default=True, description="false: rewrite/HyDE are skipped and answers are extractive (no engine)"
    )
    engines: dict[str, LLMEngineConfig] = Field(default_factory=lambda: {"default": LLMEngineConfig()})


class CacheConfig(Section):
    enabled: bool = True
    l1_max_entries: int = Field(default=2048, ge=0, description="per-replica in-memory responses")
    l1_ttl_s: float = Field(default=300.0, gt=0)
    ttl_s: int = Field(default=3600, gt=0, description="shared (Redis) exact and semantic entries")
    semantic: bool = Field(default=True, description="reuse answers of near-duplicate questions (L3)")
    semantic_threshold: float = Field(default=0.95, gt=0, le=1, description="cosine between the questions")
    semantic_max_per_scope: int = Field(default=256, gt=0, description="remembered questions per tenant+scope")
    history_turns_in_key: int = Field(default=4, ge=0, description="conversation tail that is part of the key")
    lookup_timeout_s: float = Field(default=0.3, gt=0, description="a slower cache is bypassed")


class StageFaults(Section):
    """Test-only fault hooks: a stage sleeps this long before working (seconds); all off by default."""

    delay_s: dict[str, float] = Field(default_factory=dict)
    fail: list[str] = Field(default_factory=list, description="stages (or `dense`/`bm25` arms) that raise")


class ServeConfig(Section):
    app_name: str = "ragc"
    http_host: str = Field(default="127.0.0.1", description="bind address of the Serve HTTP proxy")
    route_prefix: str = "/"
    request_timeout_s: float = Field(
        default=45.0, gt=0, description="end-to-end deadline; beyond it HTTP 504 (above the stage timeouts)"
    )
    default_top_k: int = Field(default=5, gt=0, description="passages in the answer when the request does not say")
    abstain_answer: str = "I don't have documents covering that."
    auth: AuthConfig = Field(default_factory=AuthConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    filters: dict[str, FilterField] = Field(default_factory=_default_filters)
    deployments: dict[str, DeploymentConfig] = Field(default_factory=_default_deployments)
    rewrite: RewriteConfig = Field(default_factory=RewriteConfig)
    retrieve: RetrieveConfig = Field(default_factory=RetrieveConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    synthesize: SynthesizeConfig = Field(default_factory=SynthesizeConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    faults: StageFaults = Field(default_factory=StageFaults)

    @field_validator("deployments")
    @classmethod
    def _every_stage(cls, v: dict[str, DeploymentConfig]) -> dict[str, DeploymentConfig]:
        unknown = set(v) - set(STAGES)
        if unknown:
            raise ValueError(f"unknown stages {sorted(unknown)}; stages are {list(STAGES)}")
        defaults = _default_deployments()
        return {stage: v.get(stage, defaults[stage]) for stage in STAGES}

    @model_validator(mode="after")
    def _engines_exist(self) -> ServeConfig:
        if self.llm.enabled:
            for stage, name in (("rewrite", self.rewrite.engine), ("synthesize", self.synthesize.engine)):
                if name not in self.llm.engines:
                    raise ValueError(f"serve.{stage}.engine {name!r} is not in serve.llm.engines")
        return self

    def deployment(self, stage: str) -> DeploymentConfig:
        return self.deployments[stage]

    def engines_in_use(self) -> list[str]:
        """Engines some stage calls (one deployment each); none when the LLM is off."""
        if not self.llm.enabled:
            return []
        return sorted({self.rewrite.engine, self.synthesize.engine})


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


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Turn `RAGC_A__B=v` variables into a nested dict `{"a": {"b": v}}`."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "CONFIG":
            continue
        path = name[len(ENV_PREFIX) :].lower().split(ENV_NESTING)
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = yaml.safe_load(raw) if raw else raw
    return tree


def deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(path: Path | str | None = None, environ: Mapping[str, str] | None = None) -> RagcConfig:
    """File (explicit, else `$RAGC_CONFIG`), then environment overrides on top."""
    environ = os.environ if environ is None else environ
    path = path or environ.get(ENV_PREFIX + "CONFIG")
    data: dict[str, Any] = {}
    if path:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"config file {path} must hold a mapping at the top level")
        data = loaded
    return RagcConfig.model_validate(deep_merge(data, env_overrides(environ)))
