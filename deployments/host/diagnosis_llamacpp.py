"""llama-server's failures, read from its log lines: the rules `diagnosis` puts first. Pure.

Each pattern is llama.cpp b11434's own message. Recorded here on the CPU build (bad tensor type,
a quantized V cache without flash attention, a missing GGUF, too many -ts shares, an unknown
cache type, a port in use); the KV block-size line is from reference llamacpp.md §2.3; the CUDA
allocation lines are ggml's own strings (ggml-cuda.cu `cudaMalloc failed`, ggml-alloc.c
`failed to allocate %s buffer of size %zu`, llama-model.cpp `unable to allocate %s buffer`),
not recorded: no GPU here. Function-name prefixes move between versions, so only the message
text is matched.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Explained = tuple[str, str, tuple[tuple[str, str], ...]]
Explain = Callable[[re.Match[str]], Explained]
MIB = 1024 * 1024


def _fixed(reason: str, fix: str) -> Explain:
    return lambda _m: (reason, fix, ())


def _cuda_malloc(m: re.Match[str]) -> Explained:
    mib, device = m.group(1), m.group(2)
    reason = (
        f"GPU CUDA{device} (the engine's device {device}, in lease order) could not allocate "
        f"{mib} MiB: it has less free memory than the plan put on it."
    )
    fix = (
        "Lower -c or -np, quantize the KV cache (-ctk/-ctv q8_0), move layers off that GPU "
        "with -ts, or free the memory another process holds there."
    )
    return reason, fix, ()


def _buffer(m: re.Match[str]) -> Explained:
    device, size = m.group(1) or m.group(3), m.group(2) or ""  # either alternative
    amount = f" of {int(size) / MIB:.1f} MiB" if size else ""
    host = device.startswith("CPU") or device.endswith("_Host")
    where = "host RAM" if host else f"GPU {device}"
    reason = f"llama.cpp could not allocate its {device} buffer{amount}: out of memory on {where}."
    fix = (
        "Give the host more RAM or lower --cache-ram."
        if host
        else "Put fewer layers on that GPU (-ts), lower -c/-np, or quantize the KV cache."
    )
    return reason, fix, ()


def _tensor_type(m: re.Match[str]) -> Explained:
    tensor, kind = m.group(1), m.group(2)
    reason = (
        f"The GGUF stores tensor {tensor!r} in quantization type {kind}, which this "
        "llama-server build does not know: the file is newer than the build, or damaged."
    )
    fix = "Pick another quantization of the model, or update llama-server (scripts/llama.sh)."
    return reason, fix, ()


def _architecture(m: re.Match[str]) -> Explained:
    arch = m.group(1)
    reason = f"This llama-server build does not know the model architecture {arch!r}."
    return reason, "Update llama-server, or serve the model with vLLM.", ()


def _kv_block(m: re.Match[str]) -> Explained:
    which, kind, block, head = m.group(1), m.group(2), m.group(3), m.group(4)
    reason = (
        f"A {kind} {which} cache stores blocks of {block} values, which do not divide this "
        f"model's head size ({head})."
    )
    return reason, "Use an f16 KV cache (-ctk/-ctv f16) for this model.", ()


def _split(m: re.Match[str]) -> Explained:
    shares, devices = m.group(1), m.group(2)
    reason = f"--tensor-split gives {shares} shares, but the engine sees only {devices} GPUs."
    return reason, "Give one -ts share per leased GPU (the lease and the plan disagree).", ()


def _argument(m: re.Match[str]) -> Explained:
    flag, why = m.group(1), m.group(2)
    reason = f"llama-server refused its argument {flag}: {why}."
    return reason, f"Correct {flag} (the plan's settings or the extra arguments).", ()


def _missing_file(m: re.Match[str]) -> Explained:
    path = m.group(1)
    reason = f"The GGUF file {path} is not on this host."
    return reason, "Download the model onto the host first, or fix the local path.", ()


# (code, title, pattern, explain); most specific first.
RULES: tuple[tuple[str, str, str, Explain], ...] = (
    (
        "llamacpp_gpu_oom",
        "Out of GPU memory",
        r"allocating ([\d.]+) MiB on device (\d+): cudaMalloc failed: out of memory",
        _cuda_malloc,
    ),
    (
        "llamacpp_buffer_oom",
        "Out of memory allocating a buffer",
        r"failed to allocate (\S+) buffer of size (\d+)|unable to allocate (\S+) buffer",
        _buffer,
    ),
    (
        "llamacpp_unsupported_quant",
        "Unsupported quantization type",
        r"tensor '([^']+)' has invalid ggml type (\d+)",
        _tensor_type,
    ),
    (
        "llamacpp_unknown_architecture",
        "Unsupported model architecture",
        r"unknown model architecture: '([^']+)'",
        _architecture,
    ),
    (
        "llamacpp_kv_block_size",
        "KV cache type does not fit the model's head size",
        r"(K|V) cache type (\S+) with block size (\d+) does not divide n_embd_head_\w+=(\d+)",
        _kv_block,
    ),
    (
        "llamacpp_quantized_v_needs_fa",
        "A quantized V cache needs flash attention",
        r"quantized V cache requires flash_attn to be enabled",
        _fixed(
            "The V cache is quantized and flash attention is off; llama.cpp refuses that.",
            "Set -fa on, or keep the V cache in f16.",
        ),
    ),
    (
        "llamacpp_bad_split",
        "Tensor split does not match the GPUs",
        r"got (\d+) input configs, but system only has (\d+) devices",
        _split,
    ),
    (
        "llamacpp_bad_argument",
        "llama-server refused an argument",
        r"error while handling argument \"([^\"]+)\": (.+)",
        _argument,
    ),
    (
        "llamacpp_model_missing",
        "The GGUF file is missing",
        r"failed to open GGUF file '([^']+)' \(No such file or directory\)",
        _missing_file,
    ),
    (
        "address_in_use",
        "The port is already in use",
        r"couldn't bind HTTP server socket",
        _fixed(
            "Another process listens on the engine's port.",
            "Relaunch: the worker picks a new free port.",
        ),
    ),
)

# Below every other rule: the line llama-server ends any failed load with.
LOAD_FAILED: tuple[str, str, str, Explain] = (
    "llamacpp_load_failed",
    "llama-server could not load the model",
    r"exiting due to model loading error",
    _fixed(
        "llama-server stopped while loading the model; the error lines (E) above say why.",
        "Read the log below; check the GGUF file, the split and the cache types.",
    ),
)
