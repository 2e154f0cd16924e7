"""Model placement: cores from affinity and cgroup quota; bf16 only where the hardware has it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_available_cpus_honours_a_cgroup_quota(tmp_path: Path) -> None:
    from cluster.models import available_cpus

    cpu_max = tmp_path / "cpu.max"
    unlimited = available_cpus(tmp_path / "absent")
    cpu_max.write_text("max 100000\n")
    assert available_cpus(cpu_max) == unlimited
    cpu_max.write_text("150000 100000\n")  # a 1.5-CPU limit: two threads, not the node's cores
    assert available_cpus(cpu_max) == min(2, unlimited)


def test_bf16_only_where_it_is_native(tmp_path: Path) -> None:
    from cluster.models import native_bf16, pick_dtype

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n")
    assert not native_bf16("cpu", cpuinfo)
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert native_bf16("cpu", cpuinfo)
    assert native_bf16("cuda", tmp_path / "absent") and not native_bf16("cpu", tmp_path / "absent")
    assert pick_dtype("float32", "cuda") == "float32"  # an explicit choice is kept


def test_the_llm_runs_in_float32_on_a_cpu_without_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.models
    from cluster.models import pick_llm_dtype

    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: False)
    assert pick_llm_dtype("auto", "cpu") == "float32"
    assert pick_llm_dtype("bfloat16", "cpu") == "bfloat16"  # an explicit choice is kept
    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: True)
    assert pick_llm_dtype("auto", "cpu") == "auto"  # vLLM's choice: the checkpoint's dtype


def test_encoders_run_int8_on_a_cpu_without_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.models
    from cluster.models import pick_precision

    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: False)
    assert pick_precision("auto", "cpu") == "int8"
    assert pick_precision("auto", "mps") == "float32"
    assert pick_precision("float32", "cpu") == "float32"  # an explicit choice is kept
    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: True)
    assert pick_precision("auto", "cpu") == "bfloat16" and pick_precision("auto", "cuda") == "bfloat16"


def test_int8_dot_products_only_with_vnni(tmp_path: Path) -> None:
    from cluster.models import int8_dot_products

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma f16c\n")  # this project's slow CI machines
    assert not int8_dot_products(cpuinfo)
    for flag in ("avx512_vnni", "avx_vnni", "amx_int8"):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu avx2 {flag}\n")
        assert int8_dot_products(cpuinfo), flag
    assert not int8_dot_products(tmp_path / "absent")


def test_the_cross_encoder_stays_float32_on_a_cpu_without_int8_dot_products(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.models
    from cluster.models import pick_reranker_precision

    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: False)
    monkeypatch.setattr(cluster.models, "int8_dot_products", lambda: False)
    assert pick_reranker_precision("auto", "cpu") == "float32"
    assert pick_reranker_precision("int8", "cpu") == "int8"  # an explicit choice is kept
    monkeypatch.setattr(cluster.models, "int8_dot_products", lambda: True)
    assert pick_reranker_precision("auto", "cpu") == "int8"
    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: True)
    assert pick_reranker_precision("auto", "cpu") == pick_reranker_precision("auto", "cuda") == "bfloat16"


def test_int8_is_refused_off_the_cpu() -> None:
    from cluster.models import pick_precision

    with pytest.raises(ValueError, match="int8 is dynamic quantization for CPUs"):
        pick_precision("int8", "cuda")


def test_int8_quantizes_every_linear_layer_per_channel() -> None:
    import torch

    from cluster.models import quantize_int8

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    inputs = torch.randn(3, 16)
    expected = model(inputs)
    quantize_int8(model)
    quantized = [m for m in model.modules() if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    assert len(quantized) == 2
    assert all(m.weight().qscheme() == torch.per_channel_affine for m in quantized)
    assert torch.allclose(model(inputs), expected, atol=0.05)


def test_the_embedder_reads_one_text_per_pass_in_bf16_or_int8_on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.models
    from cluster.models import one_per_pass, pick_embedding_precision

    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: True)
    assert pick_embedding_precision("auto", "cpu") == "bfloat16" and one_per_pass("bfloat16", "cpu")
    assert pick_embedding_precision("auto", "cuda") == "float32"  # a GPU pass needs its batch
    assert not one_per_pass("bfloat16", "cuda") and not one_per_pass("float32", "cpu")
    monkeypatch.setattr(cluster.models, "native_bf16", lambda device: False)
    assert pick_embedding_precision("auto", "cpu") == "int8" and one_per_pass("int8", "cpu")


def test_batch_jobs_sleep_at_barriers_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster.models import sleep_at_barriers

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    sleep_at_barriers()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    sleep_at_barriers()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
