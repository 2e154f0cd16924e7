"""The query service: every knob on the query path, per stage, with its Serve deployment options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from cluster.config.base import SecretRef, Section

STAGES = ("ingress", "rewrite", "retrieve", "rerank", "synthesize")


FilterOp = Literal["eq", "ne", "in", "gte", "lte", "contains", "contains_any", "contains_all"]


EQUALITY_OPS: tuple[FilterOp, ...] = ("eq", "ne", "in")
LIST_OPS: tuple[FilterOp, ...] = ("contains", "contains_any", "contains_all")  # the operators of a str_list field


class DeploymentConfig(Section):
    """Ray Serve knobs of one stage; `ragc serve-config` and the Helm chart are generated from these."""

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=2, ge=1)
    target_ongoing_requests: float = Field(default=4.0, gt=0)
    max_ongoing_requests: int = Field(default=16, ge=1)
    max_queued_requests: int = Field(
        default=64, ge=-1, description="-1 = unbounded; beyond it a caller is refused at once (503, or the fallback)"
    )
    overload_retry_after_s: float = Field(
        default=1.0, ge=0, description="`Retry-After` of the 503 a full queue answers (ingress and retrieve)"
    )
    num_cpus: float = Field(default=0.0, ge=0, description="CPUs reserved per replica (0 shares the node)")
    num_gpus: float = Field(default=0.0, ge=0)
    max_replicas_per_node: int | None = Field(
        default=None,
        ge=1,
        description="at most this many replicas on one node (None: no limit); with min_replicas 2 and 1 here, "
        "losing a node never takes the stage's last replica",
    )
    health_check_period_s: float = Field(default=10.0, gt=0)
    health_check_timeout_s: float = Field(default=30.0, gt=0)
    upscale_delay_s: float = Field(default=3.0, ge=0)
    downscale_delay_s: float = Field(default=60.0, ge=0)
    look_back_period_s: float = Field(default=30.0, gt=0, description="the window load is averaged over")
    metrics_interval_s: float = Field(default=10.0, gt=0, description="how often replicas report their load")


def over_defaults(given: Any, defaults: DeploymentConfig) -> Any:
    """A partial deployment block overrides its stage's own defaults, not the generic ones: `rerank:
    {max_replicas: 7}` keeps rerank's target of 8, and an engine's `{num_cpus: 0}` keeps its single replica."""
    if isinstance(given, Mapping):
        return {**defaults.model_dump(), **given}
    return given


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
    type: Literal["str", "int", "str_list"] = Field(
        default="str", description="str_list: a list of strings (a document's tags), matched by its elements"
    )
    ops: list[FilterOp] = Field(
        default_factory=list,
        description="the operators allowed on it; empty: its type's own (eq, ne, in; contains, contains_any, "
        "contains_all for str_list)",
    )

    @model_validator(mode="after")
    def _ops_of_its_type(self) -> FilterField:
        listed = self.type == "str_list"
        if not self.ops:
            self.ops = list(LIST_OPS if listed else EQUALITY_OPS)
        wrong = [op for op in self.ops if (op in LIST_OPS) != listed]
        if wrong:
            raise ValueError(f"operators {wrong} do not apply to a {self.type} field")
        return self


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
        "author": FilterField(),
        "tags": FilterField(type="str_list"),
    }


class AuthConfig(Section):
    enabled: bool = Field(default=True, description="false = single-tenant demo mode, loopback only")
    api_keys: SecretRef = Field(
        default_factory=lambda: SecretRef(env_var="RAGC_API_KEYS"),
        description="a YAML/JSON mapping {api_key: tenant}, in a file or an environment variable",
    )
    single_tenant: str = Field(default="demo", description="the tenant of every request when auth is off")
    reload_s: float = Field(
        default=10.0,
        ge=0,
        description="how often each ingress replica reads the keys again (a rotated or revoked key takes effect "
        "without a restart; a file that fails to parse keeps the keys it had); 0 = read once at start",
    )


FallbackStage = Literal["rewrite", "rerank", "synthesize"]
FALLBACK_STAGES: tuple[FallbackStage, ...] = ("rewrite", "rerank", "synthesize")


class BreakerConfig(Section):
    """Circuit breakers (per ingress replica) in front of the stages with a fallback."""

    enabled: bool = True
    stages: list[FallbackStage] = Field(default_factory=lambda: list(FALLBACK_STAGES))
    failures: int = Field(default=3, ge=1, description="consecutive failures (within window_s) that open it")
    window_s: float = Field(default=60.0, gt=0)
    open_s: float = Field(
        default=30.0, gt=0, description="how long callers take the fallback at once before one trial request"
    )


class TenantLimits(Section):
    """Admission per tenant. In `default`, unset = no limit; in `tenants`, unset = the default's, 0 = no limit."""

    requests_per_s: float | None = Field(default=None, ge=0, description="sustained rate (token bucket)")
    burst: int | None = Field(
        default=None, ge=0, description="requests admitted at once above the rate (unset: the rate, at least 1)"
    )
    concurrent: int | None = Field(
        default=None, ge=0, description="requests in flight at once (a stream counts until it ends)"
    )

    def over(self, default: TenantLimits) -> TenantLimits:
        """These limits with the default's wherever they are unset."""
        return TenantLimits(
            requests_per_s=default.requests_per_s if self.requests_per_s is None else self.requests_per_s,
            burst=default.burst if self.burst is None else self.burst,
            concurrent=default.concurrent if self.concurrent is None else self.concurrent,
        )

    def rate(self) -> tuple[float, float] | None:
        """(requests per second, bucket size), or None when the rate is not limited."""
        if not self.requests_per_s:
            return None
        return self.requests_per_s, float(self.burst or max(1.0, self.requests_per_s))


class LimitsConfig(Section):
    default: TenantLimits = Field(
        default_factory=TenantLimits, description="every tenant's admission limits (off unless set); over -> 429"
    )
    tenants: dict[str, TenantLimits] = Field(default_factory=dict, description="per-tenant overrides of `default`")
    limiter_redis_timeout_s: float = Field(
        default=0.1, gt=0, description="a slower Redis is skipped: each replica then limits on its own"
    )
    max_query_chars: int = Field(default=2000, gt=0)
    max_history_turns: int = Field(default=20, ge=0)
    max_turn_chars: int = Field(default=4000, gt=0)
    max_top_k: int = Field(default=50, gt=0)
    max_documents_page: int = Field(
        default=1000, gt=0, le=10000, description="`GET /v1/documents`: the most documents one page may ask for"
    )
    max_filters: int = Field(default=16, ge=0)
    max_in_values: int = Field(default=100, gt=0)
    max_body_bytes: int = Field(default=256 * 1024, gt=0)


class RetrieveConfig(Section):
    timeout_s: float = Field(default=5.0, gt=0)
    dense_candidates: int = Field(default=50, gt=0, le=1000, description="per-arm candidates, dense")
    bm25_candidates: int = Field(default=50, gt=0, le=1000, description="per-arm candidates, BM25")
    pool_size: int = Field(default=50, gt=0, le=1000, description="fused candidates passed to rerank")
    rrf_k: int = Field(default=60, gt=0)
    dense_weight: float = Field(default=1.0, ge=0, description="the dense arm's rank weight in the fusion")
    bm25_weight: float = Field(default=1.0, ge=0, description="the BM25 arm's rank weight in the fusion")
    similarity_floor: float = Field(
        default=0.30, ge=-1, le=1, description="dense cosine below which a question abstains (see floor_scope)"
    )
    floor_scope: Literal["query", "candidate"] = Field(
        default="query",
        description="query: abstain when no candidate reaches the floor, else keep every candidate; "
        "candidate: also drop each candidate below it",
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
    tenants: dict[str, bool] = Field(
        default_factory=dict,
        description="per tenant, rerank when the request does not say, instead of rerank_default: a reranker "
        "helps where `ragc eval` on that tenant's own labels showed it (the reranker's ragc_checks.json)",
    )
    domain_check: bool = Field(
        default=True,
        description="a reranker trained by `ragc train-reranker` records the questions it knows "
        "(ragc_domain.json): a question unlike them keeps the fusion order (`skipped`, and why), since a "
        "reranker can lower quality outside the domain it was trained on",
    )
    timeout_s: float = Field(default=3.0, gt=0)
    max_length: int | None = Field(default=None, gt=0, description="tokens per pair; unset = the model's own")
    batch_max_size: int = Field(
        default=0,
        ge=0,
        description="requests per cross-encoder call; 0 = by the replica: 1 where it scores on one CPU thread "
        "(one request's pairs already fill that pass, and a request queued behind a batch waits all of it: at 4 "
        "the slowest 5% waited a third 9 s batch), else 4 (several threads or a GPU use a bigger pass better)",
    )
    batch_wait_timeout_s: float = Field(default=0.01, ge=0)
    depth: int = Field(
        default=20,
        gt=0,
        description="fused candidates the cross-encoder scores (measured against 10-30: README, Rerank depth)",
    )
    num_threads: int = Field(
        default=0,
        ge=0,
        description="torch threads per rerank replica; 0 = the replica's reserved CPUs, or when it reserves "
        "none, the available cores (affinity, cgroup quota) / max_replicas (one forward pass scales poorly "
        "across threads)",
    )
    order: Literal["scores", "rrf"] = Field(
        default="rrf",
        description="scores: order by cross-encoder score; rrf: reciprocal-rank fusion of the cross-encoder's "
        "rank with the retrieval rank (a weak reranker then refines the order instead of replacing it)",
    )
    rrf_k: int = Field(default=60, gt=0, description="k of the rank fusion when order is rrf")
    rrf_weight: float = Field(
        default=1.0, ge=0, description="the cross-encoder rank's weight in the fusion; the retrieval rank's is 1"
    )
    dtype: Literal["auto", "float32", "bfloat16", "int8"] = Field(
        default="auto",
        description="cross-encoder precision; auto = bfloat16 where native (CUDA, AMX/AVX512-BF16 CPUs), int8 on "
        "other CPUs with int8 dot products (VNNI; dynamic quantization, one pair per pass), else float32",
    )


class RewriteConfig(Section):
    timeout_s: float = Field(default=10.0, gt=0, description="rewrite + HyDE together (CPU default; tighten on GPU)")
    rewrite_default: bool = Field(
        default=False,
        description="rewrite follow-ups when the request does not say; off by default: the packaged small "
        "model rewrites worse than the raw utterance (`ragc bench llm`); turn it on with a real instruct model",
    )
    hyde_default: bool = Field(default=False, description="HyDE when the request does not say")
    engine: str = Field(default="default", description="the `serve.llm.engines` entry that rewrites")
    history_turns: int = Field(default=4, ge=0, description="conversation turns the rewrite sees")
    history_max_chars: int = Field(default=2000, gt=0, description="the most recent turns are kept up to this")
    max_tokens: int = Field(default=48, gt=0)
    max_query_chars: int = Field(default=400, gt=0, description="a longer rewrite is refused")
    hyde_max_tokens: int = Field(default=96, gt=0)
    hyde_include_original: bool = Field(default=True, description="embed the question with the HyDE passage")
    multi_query_default: bool = Field(
        default=False, description="multi-query when the request does not say (`ragc eval` measures it)"
    )
    multi_queries: int = Field(default=3, ge=1, le=5, description="paraphrases the LLM proposes per question")
    multi_query_weight: float = Field(
        default=2.0,
        ge=1,
        description="the question's own ranked lists' weight in the fusion; each paraphrase's lists weigh 1",
    )
    multi_query_max_tokens: int = Field(default=96, gt=0)
    cache_entries: int = Field(default=4096, ge=0, description="per-replica cache of rewrites")
    cache_ttl_s: float = Field(default=3600.0, gt=0)


class AnswerCheckConfig(Section):
    """What a generated answer must pass before it is served (serve/answer_check.py)."""

    enabled: bool = Field(default=True, description="off: the model's text is served as generated")
    min_support: float = Field(
        default=0.40,
        ge=-1,
        le=1,
        description="least cosine between a claim and its cited passage's best sentence (chosen on SciFact "
        "TRAIN: python -m training.support)",
    )
    attribute: bool = Field(
        default=False,
        description="post-hoc attribution: a passing answer's claims also cite the other returned passages that "
        "support them (the ones cut from the prompt included)",
    )
    attribute_min_support: float = Field(
        default=0.67,
        ge=-1,
        le=1,
        description="least support for a citation attribution adds: the cosine a claim's most similar other "
        "abstract reaches at most 1 time in 5 (SciFact TRAIN: python -m training.support)",
    )
    retry: bool = Field(default=True, description="a failed answer is generated once more under a stricter prompt")
    retry_within_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="retry only while at least this share of the synthesis timeout is left; else the extractive answer",
    )


ResponseMode = Literal["compact", "refine", "tree_summarize", "accumulate", "no_text"]
RESPONSE_MODES: tuple[ResponseMode, ...] = ("compact", "refine", "tree_summarize", "accumulate", "no_text")


MAX_NEIGHBOURS = 3  # chunks on each side of a passage: beyond a few, a window is the whole document


def _off_or_two_or_more(value: int) -> int:
    if value == 1:
        raise ValueError("merge_siblings is 0 (off) or 2 or more: a lone passage has no siblings to merge with")
    return value


MergeSiblings = Annotated[int, Field(ge=0), AfterValidator(_off_or_two_or_more)]


class SynthesizeConfig(Section):
    response_mode: ResponseMode = Field(
        default="compact",
        description="compact: as many passages as fit, one LLM call; refine: answer from the first batch, "
        "refine with each next; tree_summarize: an answer per batch, then one over them; accumulate: an "
        "answer per passage, concatenated; no_text: retrieval only, no LLM call",
    )
    response_modes: list[ResponseMode] = Field(
        default_factory=lambda: list(RESPONSE_MODES),
        min_length=1,
        description="the modes a request may ask for (`mode`); others are refused with 400",
    )
    timeout_s: float = Field(default=25.0, gt=0, description="whole generation (CPU default; tighten on GPU)")
    admission: bool = Field(
        default=True,
        description="refuse an answer at once (extractive instead) when the engine's load says it cannot finish "
        "within timeout_s",
    )
    engine: str = Field(default="default", description="the `serve.llm.engines` entry that answers")
    max_tokens: int = Field(
        default=80,
        gt=0,
        description="tokens generated per attempt (CPU default: an answer and its strict retry both fit timeout_s)",
    )
    max_prompt_tokens: int | None = Field(
        default=448,
        gt=0,
        description="the prompt (instructions, history, passages) is packed up to this many tokens; prefill "
        "time grows with it on CPU (null: only max_model_len - max_tokens bounds it, the GPU setting)",
    )
    temperature: float = Field(default=0.0, ge=0, le=2)
    neighbours: int = Field(
        default=0,
        ge=0,
        le=MAX_NEIGHBOURS,
        description="chunks of the same document on each side of a passage that the answer reads with it (one "
        "Milvus query; the citation stays the passage); 0 = the passages alone",
    )
    merge_siblings: MergeSiblings = Field(
        default=0,
        description="when at least this many passages (2 or more) come from one section of one document, the "
        "answer reads the section whole in place of them (one Milvus query; the first keeps its rank and is "
        "cited, the others leave the list); 0 = off",
    )
    merge_max_chars: int = Field(
        default=3000,
        gt=0,
        description="a merged section longer than this is read from its first to its last retrieved passage, "
        "and not merged when that is longer too",
    )
    passage_max_chars: int = Field(default=900, gt=0, description="characters of each passage in the prompt")
    passage_excerpt_chars: int | None = Field(
        default=None,
        gt=0,
        description="each passage goes into the prompt as its sentences that share most words with the question, "
        "up to this many characters, so more passages fit a CPU-sized prompt (null: its first passage_max_chars)",
    )
    extractive_passages: int = Field(default=3, gt=0, description="passages quoted by the extractive answer")
    extractive_chars: int = Field(default=400, gt=0, description="characters quoted per passage")
    check: AnswerCheckConfig = Field(default_factory=AnswerCheckConfig)
    history_turns: int = Field(default=4, ge=0, description="conversation turns the answer sees (0: none)")
    history_max_chars: int = Field(default=1500, gt=0, description="the most recent turns are kept up to this")
    history_min_passages: int = Field(
        default=2,
        ge=1,
        description="the conversation's oldest turns give way until this many passages fit the prompt budget",
    )

    @model_validator(mode="after")
    def _default_mode_allowed(self) -> SynthesizeConfig:
        if self.response_mode not in self.response_modes:
            raise ValueError(f"response_mode {self.response_mode!r} is not in response_modes {self.response_modes}")
        return self


def _llm_deployment() -> DeploymentConfig:
    return DeploymentConfig(max_replicas=1, target_ongoing_requests=8, max_ongoing_requests=32, num_cpus=1.0)


LLMDtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]  # vLLM's own names


class LLMEngineConfig(Section):
    """One vLLM engine, served by its own deployment `llm_<name>`."""

    model: str = Field(
        default="packaged:smollm2-135m-instruct",
        description="`packaged:<name>` (converted once into the state dir), a local path, or a model id "
        "baked into the image",
    )
    served_name: str | None = Field(default=None, description="name reported in responses; default: model")
    max_model_len: int = Field(default=2048, gt=0)
    dtype: LLMDtype = Field(
        default="auto",
        description="auto = the checkpoint's dtype, except float32 on a CPU without native bf16 (AMX / "
        "AVX512-BF16), where bf16 matmuls are emulated",
    )
    enforce_eager: bool = Field(default=True, description="skip graph capture/compilation (fast start on CPU)")
    max_num_seqs: int = Field(default=16, gt=0, description="sequences batched by the engine")
    kv_cache_gb: float = Field(default=1.0, gt=0, description="CPU only: VLLM_CPU_KVCACHE_SPACE")
    stream_interval: int = Field(
        default=4, ge=1, description="tokens per streamed chunk: fewer, larger messages through Serve"
    )
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1, description="GPU only")
    tensor_parallel_size: int = Field(default=1, ge=1)
    enable_prefix_caching: bool | None = Field(
        default=None,
        description="reuse the KV cache of a prompt's shared start (system prompt, then passages in rank order); "
        "null: the engine's default for the platform (`ragc bench prefix` measures time to first token both ways)",
    )
    deployment: DeploymentConfig = Field(default_factory=_llm_deployment)

    @field_validator("deployment", mode="before")
    @classmethod
    def _over_engine_defaults(cls, v: Any) -> Any:
        return over_defaults(v, _llm_deployment())


class LLMConfig(Section):
    enabled: bool = Field(
        default=True, description="false: rewrite/HyDE are skipped and answers are extractive (no engine)"
    )
    engines: dict[str, LLMEngineConfig] = Field(default_factory=lambda: {"default": LLMEngineConfig()})


class RequestLogConfig(Section):
    """One JSON line per answered query on the ingress replica's stderr (logger `ragc.requests`)."""

    enabled: bool = True
    question_text: bool = Field(
        default=False, description="include the question's text (off: questions may carry personal data)"
    )


class FeedbackConfig(Section):
    """`POST /v1/feedback`: rating a served answer by its request id (needs Redis; `ragc feedback` reads it)."""

    enabled: bool = True
    window_s: int = Field(
        default=3600,
        gt=0,
        description="how long an answer takes feedback: its receipt (question, answer, cited documents; about "
        "1-3 KB) stays in Redis that long",
    )
    keep_text: bool = Field(
        default=True, description="the receipt keeps the question and answer text (off: only ids and outcomes)"
    )
    max_comment_chars: int = Field(default=2000, ge=0)
    max_entries_per_tenant: int = Field(
        default=10_000,
        gt=0,
        description="the tenant's feedback stream keeps about this many, the newest (about 2-4 KB each, with no TTL)",
    )
    redis_timeout_s: float = Field(
        default=0.2, gt=0, description="a receipt not written in this time is skipped (the answer is not delayed)"
    )


class CacheConfig(Section):
    enabled: bool = True
    l1_max_entries: int = Field(default=2048, ge=0, description="per-replica in-memory responses")
    l1_ttl_s: float = Field(default=300.0, gt=0)
    ttl_s: int = Field(default=3600, gt=0, description="shared (Redis) exact and semantic entries")
    degraded_ttl_s: int = Field(
        default=30,
        ge=0,
        description="a degraded answer (a stage fell back) is cached this long, exact levels only, and a full "
        "answer replaces it; 0 = never cached",
    )
    semantic: bool = Field(default=True, description="reuse answers of near-duplicate questions (L3)")
    semantic_threshold: float = Field(default=0.95, gt=0, le=1, description="cosine between the questions")
    semantic_max_per_scope: int = Field(default=256, gt=0, description="remembered questions per tenant+scope")
    history_turns_in_key: int = Field(default=4, ge=0, description="conversation tail that is part of the key")
    lookup_timeout_s: float = Field(default=0.3, gt=0, description="a slower cache is bypassed")


class AnswerabilityConfig(Section):
    """Abstention after rerank: a calibrated probability that the passages answer the question."""

    calibration: str | None = Field(
        default="auto",
        description="file written by `ragc calibrate-abstention`; auto = answerability.json beside the "
        "configured reranker when it exists; null = the cosine floor alone decides",
    )
    min_probability: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="abstain below this probability; unset = the operating point chosen at calibration",
    )


class StageFaults(Section):
    """Test-only fault hooks: a stage sleeps this long before working (seconds); all off by default."""

    delay_s: dict[str, float] = Field(default_factory=dict)
    fail: list[str] = Field(default_factory=list, description="stages (or `dense`/`bm25` arms) that raise")


class TracesConfig(Section):
    """OpenTelemetry traces (serve/tracing.py): Ray Serve's spans per request and deployment call, ours per
    stage, retrieval arm and LLM generation; exported over OTLP/HTTP to where the standard `OTEL_EXPORTER_OTLP_*`
    variables say (default http://localhost:4318)."""

    enabled: bool = Field(default=False, description="off: no span is recorded anywhere")
    sampling_ratio: float = Field(
        default=1.0, ge=0, le=1, description="share of requests traced (a traced caller's traceparent decides for it)"
    )


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
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    filters: dict[str, FilterField] = Field(default_factory=_default_filters)
    deployments: dict[str, DeploymentConfig] = Field(default_factory=_default_deployments)
    rewrite: RewriteConfig = Field(default_factory=RewriteConfig)
    retrieve: RetrieveConfig = Field(default_factory=RetrieveConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    answerability: AnswerabilityConfig = Field(default_factory=AnswerabilityConfig)
    synthesize: SynthesizeConfig = Field(default_factory=SynthesizeConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    request_log: RequestLogConfig = Field(default_factory=RequestLogConfig)
    feedback: FeedbackConfig = Field(default_factory=FeedbackConfig)
    traces: TracesConfig = Field(default_factory=TracesConfig)
    faults: StageFaults = Field(default_factory=StageFaults)

    @field_validator("deployments", mode="before")
    @classmethod
    def _over_stage_defaults(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            return v
        defaults = _default_deployments()
        return {
            stage: over_defaults(given, defaults[stage]) if stage in defaults else given for stage, given in v.items()
        }

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

    def answer_budget(self) -> dict[str, Any] | None:
        """What one LLM answer may cost, as `/readyz` and `ragc status` report it; None without an LLM."""
        if not self.llm.enabled:
            return None
        synth = self.synthesize
        return {
            "timeout_s": synth.timeout_s,
            "max_tokens": synth.max_tokens,
            "max_prompt_tokens": synth.max_prompt_tokens,
            "max_model_len": self.llm.engines[synth.engine].max_model_len,
            "passages": self.default_top_k,
            "passage_max_chars": synth.passage_max_chars,
            "retry": synth.check.enabled and synth.check.retry,
        }

    def deployment(self, stage: str) -> DeploymentConfig:
        return self.deployments[stage]

    def engines_in_use(self) -> list[str]:
        """Engines some stage calls (one deployment each); none when the LLM is off."""
        if not self.llm.enabled:
            return []
        return sorted({self.rewrite.engine, self.synthesize.engine})
