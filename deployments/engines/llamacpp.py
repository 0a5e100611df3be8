"""`llama-server` (llama.cpp b11434): the GGUF engine, an external binary, never imported.

Every placement flag is passed explicitly (reference llamacpp.md §3.1): left out, `-c` is the
model's training context, `-np` is "auto" (4 unified slots), `-ngl` and the split are chosen by
`--fit` from the memory that happens to be free at start, so two deployments sharing GPUs would
place layers differently from the plan. With `--fit off` the planner owns the decision, and
`-lv 4` makes the per-device buffer lines print so that the host can measure it
(`deployments.engines.llamacpp_memory`).
"""

from __future__ import annotations

from deployments.engines.base import (
    EngineCommand,
    ExternalCommand,
    LaunchSpec,
    ReadinessProbe,
    UnsupportedSpec,
    base_url,
    check_common,
    common_env,
    refuse_lora,
    reject_flags,
)

LLAMA_SERVER_BIN_ENV = "SHARDBOARD_LLAMA_SERVER_BIN"
API_KEY_ENV = "LLAMA_API_KEY"  # read by llama-server when --api-key is absent (its --help)
SPLIT_MODES = frozenset({"none", "layer", "row", "tensor"})
FLASH_ATTN = frozenset({"on", "off", "auto"})
CACHE_TYPES = frozenset({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"})
_UNQUANTIZED = frozenset({"f32", "f16", "bf16"})
_SET_BY_PANEL = "the panel sets it from the plan"
_FORBIDDEN_EXTRA = {
    **dict.fromkeys(("-m", "--model", "-mu", "--model-url", "-hf", "--hf-repo"), _SET_BY_PANEL),
    **dict.fromkeys(("--host", "--port", "-a", "--alias"), _SET_BY_PANEL),
    **dict.fromkeys(("-c", "--ctx-size", "-np", "--parallel"), _SET_BY_PANEL),
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers"), _SET_BY_PANEL),
    **dict.fromkeys(("-sm", "--split-mode", "-ts", "--tensor-split"), _SET_BY_PANEL),
    **dict.fromkeys(("-mg", "--main-gpu", "-ctk", "--cache-type-k"), _SET_BY_PANEL),
    **dict.fromkeys(("-ctv", "--cache-type-v", "-fa", "--flash-attn"), _SET_BY_PANEL),
    **dict.fromkeys(("-ub", "--ubatch-size", "-kvu", "--kv-unified"), _SET_BY_PANEL),
    **dict.fromkeys(
        ("-fit", "--fit", "-fitt", "--fit-target"),
        "the plan places the layers (--fit off); a fit would move them",
    ),
    **dict.fromkeys(
        ("-lv", "--verbosity", "--log-verbosity"), "the host reads the -lv 4 memory lines"
    ),
    **dict.fromkeys(
        ("--api-key", "--api-key-file"),
        f"the key goes through {API_KEY_ENV} so that it is not visible in ps",
    ),
    **dict.fromkeys(("-dev", "--device"), "the leased GPUs are chosen with CUDA_VISIBLE_DEVICES"),
    "--sleep-idle-seconds": "a lease assumes the model stays resident",
    "--models-dir": "router mode: one engine per lease",
}


class LlamaServerAdapter(ExternalCommand):
    name = "llamacpp"
    supports_api_key = True
    bin_env = LLAMA_SERVER_BIN_ENV

    def default_executable(self) -> str:
        return "llama-server"

    def build(self, spec: LaunchSpec) -> EngineCommand:
        _check(spec)
        served = spec.served_model_name or spec.model
        env = common_env(spec)
        if spec.api_key:
            env[API_KEY_ENV] = spec.api_key
        return EngineCommand(
            engine=self.name,
            argv=self.argv(spec),
            env=env,
            base_url=base_url(spec.host, spec.port),
            # /health answers 503 "Loading model" until the weights are in (§3.2); the
            # listener is up before that, so a refused connection is an early start.
            probe=ReadinessProbe(
                models_path="/v1/models", api_key=spec.api_key, expected_model=served
            ),
            request_model=served,
            supports_api_key=True,
            warnings=_warnings(spec),
        )

    def argv(self, spec: LaunchSpec, *, listen: bool = True) -> tuple[str, ...]:
        argv = [self.executable, "-m", spec.model]
        if listen:
            argv += ["-a", spec.served_model_name or spec.model]
            argv += ["--host", spec.host, "--port", str(spec.port)]
        if spec.max_model_len is not None:
            # One KV pool for all slots: -c is then the plan's KV tokens, not c/np per slot.
            argv += ["-c", str(spec.max_model_len), "-kvu"]
        n_parallel = spec.n_parallel or spec.max_num_seqs
        if n_parallel is not None:
            argv += ["-np", str(n_parallel)]
        argv += _placement(spec)
        if spec.cache_type_k:
            argv += ["-ctk", spec.cache_type_k]
        if spec.cache_type_v:
            argv += ["-ctv", spec.cache_type_v]
        argv += ["-fa", flash_attn(spec)]
        if spec.ubatch is not None:
            argv += ["-ub", str(spec.ubatch)]
        argv += ["--fit", "off", "--metrics", "--no-ui", "--offline", "-lv", "4"]
        return (*argv, *spec.extra_args)


def flash_attn(spec: LaunchSpec) -> str:
    """`on` where llama.cpp needs it (a quantized V cache, `-sm tensor`), else the plan's."""
    if spec.flash_attn:
        return spec.flash_attn
    quantized_v = (spec.cache_type_v or "f16") not in _UNQUANTIZED
    return "on" if quantized_v or spec.split_mode == "tensor" else "auto"


def split_mode(spec: LaunchSpec) -> str:
    if spec.split_mode:
        return spec.split_mode
    return "layer" if spec.device == "cuda" and _gpu_count(spec) > 1 else "none"


def _gpu_count(spec: LaunchSpec) -> int:
    """The leased GPUs; a copy-paste line, rendered without a lease, counts the plan's shares."""
    return len(spec.gpu_indices) or len(spec.tensor_split)


def _placement(spec: LaunchSpec) -> list[str]:
    mode = split_mode(spec)
    if spec.device == "cpu":
        return ["-ngl", "0", "-sm", "none"]
    layers = "all" if spec.n_gpu_layers is None else str(spec.n_gpu_layers)
    argv = ["-ngl", layers, "-sm", mode]
    if mode in ("layer", "row", "tensor"):
        # Always given: without it the split follows each GPU's free memory at start (§3.4).
        split = spec.tensor_split or (1.0,) * _gpu_count(spec)
        argv += ["-ts", ",".join(_number(x) for x in split)]
    if mode in ("none", "row"):
        argv += ["-mg", str(spec.main_gpu or 0)]
    return argv


def _number(value: float) -> str:
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


def _check(spec: LaunchSpec) -> None:
    check_common(spec)
    refuse_lora(spec, "llama-server")
    if spec.tensor_parallel_size != 1 or spec.pipeline_parallel_size != 1 or spec.spans_hosts:
        raise UnsupportedSpec(
            "llama-server places layers with -ngl/-sm/-ts on one host: TP and PP must be 1"
        )
    if not spec.model.endswith(".gguf"):
        raise UnsupportedSpec(f"llama-server loads a local .gguf file, not {spec.model!r}")
    mode = split_mode(spec)
    if mode not in SPLIT_MODES:
        raise UnsupportedSpec(f"split mode {mode!r} is not one of {sorted(SPLIT_MODES)}")
    _check_split(spec, mode)
    for which, kind in (("K", spec.cache_type_k), ("V", spec.cache_type_v)):
        if kind is not None and kind not in CACHE_TYPES:
            raise UnsupportedSpec(
                f"{which} cache type {kind!r} is not one of {sorted(CACHE_TYPES)}"
            )
    _check_attention(spec, mode)
    if spec.n_gpu_layers is not None and spec.n_gpu_layers < 0:
        raise UnsupportedSpec("n_gpu_layers must be 0 or more (None offloads every layer)")
    reject_flags(spec.extra_args, _FORBIDDEN_EXTRA)


def _check_split(spec: LaunchSpec, mode: str) -> None:
    gpus = len(spec.gpu_indices)
    if spec.tensor_split and len(spec.tensor_split) != gpus:
        raise UnsupportedSpec(
            f"tensor_split has {len(spec.tensor_split)} shares for {gpus} leased GPUs"
        )
    if spec.tensor_split and (min(spec.tensor_split) < 0 or sum(spec.tensor_split) <= 0):
        raise UnsupportedSpec("tensor_split shares must be 0 or more, and not all 0")
    if spec.main_gpu is not None and not 0 <= spec.main_gpu < max(gpus, 1):
        raise UnsupportedSpec(f"main_gpu {spec.main_gpu} is not one of the {gpus} leased GPUs")
    if mode == "none" and gpus > 1:
        raise UnsupportedSpec(f"split mode none uses one GPU; {gpus} are leased")


def _check_attention(spec: LaunchSpec, mode: str) -> None:
    fa = flash_attn(spec)
    if fa not in FLASH_ATTN:
        raise UnsupportedSpec(f"flash_attn {fa!r} is not one of {sorted(FLASH_ATTN)}")
    if (spec.cache_type_v or "f16") not in _UNQUANTIZED and fa != "on":
        raise UnsupportedSpec("a quantized V cache needs flash attention on")
    if mode == "tensor":
        if fa != "on":
            raise UnsupportedSpec("split mode tensor needs flash attention on")
        kinds = {spec.cache_type_k or "f16", spec.cache_type_v or "f16"}
        if not kinds <= _UNQUANTIZED:
            raise UnsupportedSpec("split mode tensor needs an f16, bf16 or f32 KV cache")


def _warnings(spec: LaunchSpec) -> tuple[str, ...]:
    warnings = []
    if not spec.api_key:
        warnings.append("no API key: /v1 on this engine is open to anyone who can reach the port")
    mode = split_mode(spec)
    if mode == "row":
        warnings.append("split mode row is deprecated in llama.cpp; prefer layer")
    if mode == "tensor":
        warnings.append("split mode tensor is experimental in llama.cpp")
    if spec.max_model_len is None:
        warnings.append("no context size: llama-server sizes its KV cache for the training context")
    ignored = {
        "gpu_memory_utilization": spec.gpu_memory_utilization,
        "dtype": spec.dtype,
        "quantization": spec.quantization,
        "kv_cache_dtype": spec.kv_cache_dtype,
        "max_num_batched_tokens": spec.max_num_batched_tokens,
        "block_size": spec.block_size,
    }
    unused = sorted(k for k, v in ignored.items() if v is not None)
    if unused:
        warnings.append(f"ignored by llama-server: {', '.join(unused)}")
    return tuple(warnings)
