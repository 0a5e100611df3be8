"""Engine log → a human reason and a suggested fix. Pure: text in, value out."""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass

from deployments.host import diagnosis_llamacpp as llamacpp
from deployments.host import diagnosis_vllm_cpu as vllm_cpu

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EXCEPTION_LINE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)):\s*(.+)")


@dataclass(frozen=True, slots=True)
class Diagnosis:
    code: str
    title: str
    reason: str
    fix: str
    matched_line: str
    suggested_args: tuple[tuple[str, str], ...] = ()


Explain = Callable[[re.Match[str]], tuple[str, str, tuple[tuple[str, str], ...]]]


@dataclass(frozen=True, slots=True)
class _Rule:
    code: str
    title: str
    pattern: re.Pattern[str]
    explain: Explain


def _fixed(reason: str, fix: str) -> Explain:
    return lambda _m: (reason, fix, ())


def _kv_len_v1(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    wanted, estimate = m.group(1), m.group(2)
    reason = (
        f"One request of the full context ({wanted} tokens) needs more KV cache than is left "
        f"after the weights; about {estimate} tokens fit."
    )
    fix = f"Set --max-model-len {estimate} (or less), or raise gpu_memory_utilization."
    return reason, fix, (("--max-model-len", estimate),)


def _kv_len_v0(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    wanted, fits = m.group(1), m.group(2)
    reason = f"The context ({wanted} tokens) is longer than the KV cache can hold ({fits} tokens)."
    fix = f"Set --max-model-len {fits} (or less), or raise gpu_memory_utilization."
    return reason, fix, (("--max-model-len", fits),)


def _derived_len(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    wanted, derived = m.group(1), m.group(2)
    limit = re.search(r"max_position_embeddings=(\d+)", derived)
    reason = f"max_model_len {wanted} is above what the model supports ({derived})."
    if limit is None:
        return reason, "Lower --max-model-len to the model's limit.", ()
    fix = f"Set --max-model-len {limit.group(1)} (the model's max_position_embeddings)."
    return reason, fix, (("--max-model-len", limit.group(1)),)


def _free_memory(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    device, free_gib, total_gib, wanted = m.group(1), m.group(2), m.group(3), m.group(4)
    fits = math.floor(float(free_gib) / float(total_gib) * 100) / 100 - 0.01
    reason = (
        f"{device} had only {free_gib} of {total_gib} GiB free at start, less than "
        f"gpu_memory_utilization {wanted} asks for: another process holds memory on it."
    )
    if fits <= 0:
        return reason, "Free the GPU (stop the other process) and launch again.", ()
    fix = f"Stop the other process on the GPU, or set --gpu-memory-utilization {fits:.2f}."
    return reason, fix, (("--gpu-memory-utilization", f"{fits:.2f}"),)


def _heads(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    heads, tp = m.group(1), m.group(2)
    reason = (
        f"The model has {heads} attention heads, which tensor parallel size {tp} does not divide."
    )
    return reason, f"Choose a tensor parallel size that divides {heads} (e.g. 1, 2, 4, 8).", ()


def _vocab(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    size, tp = m.group(1), m.group(2)
    reason = f"A model dimension ({size}, usually the vocabulary) is not divisible by TP {tp}."
    return (
        reason,
        f"Choose a tensor parallel size that divides {size}, or use pipeline parallel.",
        (),
    )


def _world_size(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    world, gpus = m.group(1), m.group(2)
    reason = f"TP x PP = {world} GPUs, but the engine sees only {gpus} on this host."
    return reason, "Lease as many GPUs as TP x PP, or use a multi-host (Ray) layout.", ()


def _sampler_oom(m: re.Match[str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    seqs = m.group(1)
    reason = f"The GPU ran out of memory warming up the sampler for {seqs} concurrent sequences."
    return reason, "Lower --max-num-seqs or --gpu-memory-utilization.", ()


def _rule(code: str, title: str, pattern: str, explain: Explain) -> _Rule:
    return _Rule(code, title, re.compile(pattern, re.IGNORECASE), explain)


# Most specific first: a wrapper ("Engine core initialization failed") sits below its cause.
RULES: tuple[_Rule, ...] = (
    *(_rule(*rule) for rule in llamacpp.RULES),
    *(_rule(*rule) for rule in vllm_cpu.RULES),
    _rule(
        "vllm_missing",
        "vLLM is not installed on this host",
        r"No module named '?vllm'?|vllm: (?:command )?not found|"
        r"No such file or directory: '[^']*vllm'",
        _fixed(
            "The vLLM executable could not be started on the host.",
            "Install vLLM in its own venv on the host and point SHARDBOARD_VLLM_BIN at it.",
        ),
    ),
    _rule(
        "transformers_serving_missing",
        "transformers serve lacks its serving extra",
        r"Missing dependencies for serving",
        _fixed(
            "transformers is installed without the packages `transformers serve` needs.",
            "pip install 'transformers[serving]' in the engine's venv.",
        ),
    ),
    _rule(
        "ray_missing",
        "Ray is not installed",
        r"Failed to import Ray|No module named '?ray'?",
        _fixed(
            "A multi-host layout uses vLLM's Ray executor, and Ray is not installed.",
            "pip install ray in vLLM's venv on every host, start the Ray cluster, relaunch.",
        ),
    ),
    _rule(
        "address_in_use",
        "The port is already in use",
        r"Address already in use|\[Errno 98\]",
        _fixed(
            "Another process listens on the engine's port.",
            "Relaunch: the worker picks a new free port.",
        ),
    ),
    _rule(
        "gated_repo",
        "The model is gated",
        r"GatedRepoError|Cannot access gated repo|is gated|Access to model \S+ is restricted",
        _fixed(
            "The Hub repository is gated and this host has no token with access to it.",
            "Accept the model's terms on the Hub and give the host an HF_TOKEN with access.",
        ),
    ),
    _rule(
        "repo_not_found",
        "The model repository was not found",
        r"RepositoryNotFoundError|Repository Not Found|RevisionNotFoundError|"
        r"is not a valid model identifier|is not a local folder and is not a valid",
        _fixed(
            "The Hub id or revision does not exist (or is private to another account).",
            "Check the model id and revision; for a private repo, set HF_TOKEN on the host.",
        ),
    ),
    _rule(
        "local_entry_not_found",
        "Model files are not on this host",
        r"LocalEntryNotFoundError|cannot find the requested files in the local cache|"
        r"outgoing traffic has been disabled|OfflineModeIsEnabled",
        _fixed(
            "The engine runs offline and the model's files are not in this host's cache.",
            "Download the model onto the host first (or point the deployment at a local path).",
        ),
    ),
    _rule(
        "heads_not_divisible",
        "Attention heads not divisible by tensor parallel size",
        r"Total number of attention heads \((\d+)\) must be divisible by tensor parallel "
        r"size \((\d+)\)",
        _heads,
    ),
    _rule(
        "vocab_not_divisible",
        "Model size not divisible by tensor parallel size",
        r"AssertionError: (\d+) is not divisible by (\d+)",
        _vocab,
    ),
    _rule(
        "world_size_too_large",
        "More GPUs requested than the host has",
        r"World size \((\d+)\) is larger than the number of available GPUs \((\d+)\)",
        _world_size,
    ),
    _rule(
        "max_model_len_above_model",
        "max_model_len above the model's limit",
        r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len "
        r"\((.+?)\)(?:\s+in model's config\.json)?\.",
        _derived_len,
    ),
    _rule(
        "max_model_len_too_long_for_kv",
        "Context too long for the KV cache",
        r"max seq len \((\d+)\).*estimated maximum model length is (\d+)",
        _kv_len_v1,
    ),
    _rule(
        "max_model_len_too_long_for_kv",
        "Context too long for the KV cache",
        r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be "
        r"stored in KV cache \((\d+)\)",
        _kv_len_v0,
    ),
    _rule(
        "max_model_len_too_long_for_kv",
        "Context too long for the KV cache",
        r"To serve at least one request with the models?'?s'? max seq len \((\d+)\)",
        lambda m: (
            f"One request of the full context ({m.group(1)} tokens) needs more KV cache than "
            "is left after the weights.",
            "Lower --max-model-len, or raise gpu_memory_utilization / use more GPUs.",
            (),
        ),
    ),
    _rule(
        "gpu_memory_busy_at_start",
        "Not enough free GPU memory at start",
        r"Free memory on device (\S+) \(([\d.]+)/([\d.]+) GiB\) on startup is less than "
        r"desired GPU memory utilization \(([\d.]+)",
        _free_memory,
    ),
    _rule(
        "no_kv_cache_memory",
        "No memory left for the KV cache",
        r"No available memory for the cache blocks",
        _fixed(
            "After loading the weights nothing was left for the KV cache.",
            "Raise --gpu-memory-utilization, use more GPUs (higher TP), or a quantized model.",
        ),
    ),
    _rule(
        "cuda_oom_sampler",
        "Out of GPU memory warming up the sampler",
        r"CUDA out of memory occurred when warming up sampler with (\d+) dummy requests",
        _sampler_oom,
    ),
    _rule(
        "cuda_oom",
        "CUDA out of memory",
        r"CUDA out of memory|OutOfMemoryError",
        _fixed(
            "The GPU ran out of memory.",
            "Lower --gpu-memory-utilization, --max-num-seqs or --max-model-len, or use more GPUs.",
        ),
    ),
    _rule(*llamacpp.LOAD_FAILED),
    _rule(*vllm_cpu.CORE_DIED),
)

_ENGINE_CORE_FAILED = re.compile(r"Engine core initialization failed")


def diagnose(log_text: str) -> Diagnosis | None:
    lines = [_ANSI.sub("", line).rstrip() for line in log_text.splitlines()]
    for rule in RULES:
        found = _last_match(rule.pattern, lines)
        if found is not None:
            match, line = found
            reason, fix, args = rule.explain(match)
            return Diagnosis(rule.code, rule.title, reason, fix, line.strip(), args)
    return _engine_core_failed(lines)


def diagnose_exit(log_text: str, exit_code: int | None, signal_number: int | None) -> Diagnosis:
    """Why an engine that nobody stopped has gone: the log's reason, else what the exit says."""
    found = diagnose(log_text)
    if found is not None:
        return found
    lines = [_ANSI.sub("", line).rstrip() for line in log_text.splitlines()]
    last_error = _root_cause_above(lines, len(lines))
    if signal_number == signal.SIGKILL:
        return Diagnosis(
            "killed",
            "The engine was killed (SIGKILL)",
            "The engine was killed by signal 9 (SIGKILL). Something outside the engine killed "
            "it: the kernel's OOM killer when the host ran out of RAM, or an operator.",
            "Check `dmesg` / the host's memory; give the engine more RAM or a smaller model.",
            last_error or "",
        )
    detail = f"; last error: {last_error}" if last_error else "."
    if signal_number is not None:
        return Diagnosis(
            "engine_exited",
            f"The engine was killed ({signal_name(signal_number)})",
            f"The engine was {exit_text(exit_code, signal_number)}{detail}",
            "Something outside Shardboard signalled it (an operator, a service manager, a "
            "shutdown); relaunch it once that is sorted out.",
            last_error or "",
        )
    return Diagnosis(
        "engine_exited",
        "The engine exited",
        f"The engine exited with {exit_text(exit_code, signal_number)}{detail}",
        "Read the log below; relaunch once the cause is fixed.",
        last_error or "",
    )


def exit_text(exit_code: int | None, signal_number: int | None) -> str:
    """How a process ended, for people: 'killed by signal 15 (SIGTERM)', 'exit code 1'."""
    if signal_number is not None:
        return f"killed by signal {signal_number} ({signal_name(signal_number)})"
    if exit_code is not None:
        return f"exit code {exit_code}"
    return "an unknown status (adopted after a worker restart)"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def diagnose_spawn_error(error: OSError, executable: str) -> Diagnosis:
    """An engine that could not even be exec'd (spawn raised) gets a diagnosis too."""
    if isinstance(error, FileNotFoundError) and "llama-server" in executable:
        code, title = "llama_server_missing", "llama-server is not installed on this host"
        fix = "Build it with scripts/llama.sh, or point SHARDBOARD_LLAMA_SERVER_BIN at one."
    elif isinstance(error, FileNotFoundError) and "vllm" in executable.lower():
        code, title = "vllm_missing", "vLLM is not installed on this host"
        fix = "Install vLLM in its own venv on the host and point SHARDBOARD_VLLM_BIN at it."
    elif isinstance(error, FileNotFoundError):
        code, title = "executable_missing", "The engine executable was not found"
        fix = "Install the engine on the host, or configure the path to its executable."
    else:
        code, title = "spawn_failed", "The engine could not be started"
        fix = "Check that the executable exists, is executable and that the log folder is writable."
    reason = f"Starting {executable!r} failed: {error}"
    return Diagnosis(code, title, reason, fix, str(error))


def _last_match(pattern: re.Pattern[str], lines: list[str]) -> tuple[re.Match[str], str] | None:
    for line in reversed(lines):
        match = pattern.search(line)
        if match is not None:
            return match, line
    return None


def _engine_core_failed(lines: list[str]) -> Diagnosis | None:
    found = _last_match(_ENGINE_CORE_FAILED, lines)
    if found is None:
        return None
    index = len(lines) - 1 - lines[::-1].index(found[1])
    cause = _root_cause_above(lines, index)
    reason = f"The engine core failed to start: {cause}" if cause else "The engine core failed."
    return Diagnosis(
        "engine_core_failed",
        "The engine failed to initialise",
        reason,
        "Read the root cause in the log above the failure; fix the argument or the host.",
        found[1].strip(),
    )


def _root_cause_above(lines: list[str], index: int) -> str | None:
    for line in reversed(lines[:index]):
        match = _EXCEPTION_LINE.search(line)
        if match is not None and not _ENGINE_CORE_FAILED.search(line):
            return f"{match.group(1)}: {match.group(2)}"
    return None
