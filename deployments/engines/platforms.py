"""What each engine does on the device it runs on, known before anything starts (issue 37).

A device is "gpu" (NVIDIA GPUs: vLLM's CUDA build, transformers and llama-server on CUDA) or
"cpu": a host's CPU and RAM, where vLLM runs its CPU build, and where every engine of a host
whose GPUs are simulated runs in their place. The launch form says from here what a host runs;
the launch, the host's spawn and its idle controller read the same answers, so no engine is
started with a flag it refuses and an idle policy on an engine that cannot sleep scales it to
zero, saying why. Pure: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU = "gpu"
CPU = "cpu"
DEVICES = (GPU, CPU)
_LABELS = {"vllm": "vLLM", "transformers": "transformers serve", "llamacpp": "llama.cpp"}
# vLLM 0.32's CPU platform (vllm/platforms/cpu.py) refuses the flag at start: its pydantic
# check raises "Sleep mode is not supported on current platform".
_NO_SLEEP = {
    ("vllm", CPU): (
        'vLLM on the CPU has no sleep mode (its CPU platform refuses --enable-sleep-mode: "Sleep '
        'mode is not supported on current platform")'
    ),
    ("transformers", GPU): "transformers serve has no sleep mode",
    ("transformers", CPU): "transformers serve has no sleep mode",
    ("llamacpp", GPU): "llama-server has no sleep mode",
    ("llamacpp", CPU): "llama-server has no sleep mode",
}


def no_sleep_reason(engine: str, device: str) -> str:
    """Why `engine` on `device` cannot sleep ("" when it can: vLLM on a GPU)."""
    return _NO_SLEEP.get((engine, device), "")


def sleeps(engine: str, device: str) -> bool:
    return engine == "vllm" and device == GPU


def idle_words(engine: str, device: str) -> str:
    """What an idle policy does to this engine there, in the pages' words."""
    if sleeps(engine, device):
        return "sleeps"
    return f"scales to zero ({no_sleep_reason(engine, device)})"


@dataclass(frozen=True, slots=True)
class HostEngine:
    """One engine a host runs: where, and what it does when idle."""

    engine: str
    label: str
    where: str
    idle: str


def host_engines(*, simulated: bool, gpus: int, cpu: bool) -> tuple[HostEngine, ...]:
    """The engines a host runs and where: its GPUs (simulated ones: its CPU in their place),
    and vLLM's CPU build on its CPU device when it offers one (`cpu`)."""
    if gpus and simulated:
        device, where = CPU, "on the CPU, in place of its simulated GPUs"
    else:
        device, where = GPU, "on its GPUs"
    found = []
    if gpus:
        for engine in ("vllm", "transformers", "llamacpp"):
            label = "vLLM (its CPU build)" if engine == "vllm" and device == CPU else None
            found.append(_entry(engine, device, where, label))
    if cpu:
        found.append(_entry("vllm", CPU, "on its CPU device (RAM leased)", "vLLM (its CPU build)"))
    return tuple(found)


def _entry(engine: str, device: str, where: str, label: str | None) -> HostEngine:
    return HostEngine(engine, label or _LABELS[engine], where, idle_words(engine, device))


def ray_refusal(*, hosts: int, device: str, any_simulated: bool) -> str | None:
    """Why vLLM cannot run one model over these hosts, or None. vLLM on the CPU (a CPU plan,
    or simulated GPUs, whose engines run on the CPU in their place) cannot span hosts: its CPU
    build refuses Ray (its engine core stops with "ValueError: current platform cpu does not
    support ray.", v1/executor/ray_utils.py:571)."""
    if hosts < 2 or (device != CPU and not any_simulated):
        return None
    return (
        "This plan spans several hosts on the CPU (or simulated GPUs, where vLLM runs on the "
        'CPU), and vLLM on the CPU cannot run on Ray (it stops with "current platform cpu does '
        'not support ray."). A model over several hosts needs GPU hosts; leave the further '
        "hosts empty to run it on one host."
    )
