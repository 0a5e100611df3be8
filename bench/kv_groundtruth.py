"""Ground truth for the planner's KV sizing from vLLM's own allocator: shape-true tiny models of
every family (bench/kv_groundtruth_models.py) started on the real CPU vLLM (scripts/vllm.sh) at
two or more KV spaces and max-model-lens, what each start logged, and the planner's figure
beside it. vLLM sizes the KV cache in code every platform shares (page sizes per layer kind,
KV-cache groups, Mamba page padding, the block-size LCM, tokens from bytes), so each start
checks the rules the planner uses on GPUs too.

    .venv/bin/python bench/kv_groundtruth.py              # start every case not yet recorded
    .venv/bin/python bench/kv_groundtruth.py --only NAME  # one model's cases (again)
    .venv/bin/python bench/kv_groundtruth.py --export     # recorded starts -> planner cases
    .venv/bin/python bench/kv_groundtruth.py --table      # logged vs planned (markdown)

One vLLM at a time; models and logs under var/kvgt/; the starts recorded in
var/kvgt/results.json, exported as planner cases to tests/deployments/planning/fixtures/
cpu_cases (cases.tsv and each model's config.json), which the tests plan without vLLM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import kv_groundtruth_models as shapes_mod  # noqa: E402
import kv_groundtruth_run as run  # noqa: E402

WORK = ROOT / "var" / "kvgt"
RESULTS = WORK / "results.json"
PORT = 6480
MIB = 1 << 20
GIB = 1 << 30

# (model, KV space bytes, max-model-len): two or more per model; a space too small for one
# request is a case too (vLLM's refusal, which the planner must predict).
CASES: list[tuple[str, int, int]] = [
    ("llama-3.1-8b", 768 * MIB, 4096),
    ("llama-3.1-8b", 1 * GIB, 8192),  # refused: the null block leaves 0.98 GiB for 1 GiB
    ("llama-3.1-8b", 256 * MIB, 4096),  # refused
    ("qwen3-14b", 640 * MIB, 2048),
    ("qwen3-14b", 1 * GIB, 4096),
    ("gpt-oss-20b", 128 * MIB, 8192),  # refused: the sliding layers' in-flight blocks
    ("gpt-oss-20b", 512 * MIB, 16384),
    ("gpt-oss-20b", 1 * GIB, 32768),
    ("gpt-oss-120b", 1 * GIB, 16384),
    ("gpt-oss-120b", 2 * GIB, 32768),
    ("gemma-2-9b", 1536 * MIB, 2048),
    ("gemma-2-9b", 2 * GIB, 4096),
    ("gemma-3-defaults", 1 * GIB, 8192),
    ("gemma-3-defaults", 2 * GIB, 32768),
    ("gemma-4-26b-a4b", 1 * GIB, 8192),
    ("gemma-4-26b-a4b", 2 * GIB, 32768),
    ("deepseek-v3", 256 * MIB, 2048),
    ("deepseek-v3", 512 * MIB, 4096),
    ("deepseek-v2-lite", 128 * MIB, 2048),
    ("deepseek-v2-lite", 256 * MIB, 4096),
    ("deepseek-v3.2", 512 * MIB, 4096),  # sparse MLA: refused on the CPU
    ("qwen3-next-80b-a3b", 256 * MIB, 4096),
    ("qwen3-next-80b-a3b", 512 * MIB, 16384),
    ("qwen3-next-80b-a3b", 1 * GIB, 32768),
    ("qwen3.5-27b", 1 * GIB, 4096),
    ("qwen3.5-27b", 2 * GIB, 16384),
    ("qwen3.5-35b-a3b", 512 * MIB, 8192),
    ("qwen3.5-35b-a3b", 1 * GIB, 32768),
    ("nemotron-3-nano-30b", 256 * MIB, 8192),  # refused (below)
    ("nemotron-3-nano-30b", 1 * GIB, 65536),  # refused: relu2 experts have no CPU kernel
    ("nemotron-3-nano-30b-mlp", 256 * MIB, 8192),
    ("nemotron-3-nano-30b-mlp", 1 * GIB, 65536),
    ("nemotron-h-56b", 4 * GIB, 4096),
    ("nemotron-h-56b", 4608 * MIB, 8192),
    ("qwen3-235b-a22b", 512 * MIB, 2048),
    ("qwen3-235b-a22b", 1 * GIB, 4096),
    ("llama-4-scout", 512 * MIB, 2048),
    ("llama-4-scout", 1 * GIB, 4096),
]


# vLLM 0.32's qwen3_5.py imports qwen3_vl.py, which imports transformers' Qwen2-VL image
# processor, which imports torchvision: scripts/vllm.sh removes torchvision (the registry's
# build fails against torch 2.13), so the text-only Qwen3.5 classes fail to import ("No module
# named 'torchvision'"). These start with an import-only stand-in (bench/kv_groundtruth_stubs);
# nothing of it runs in a text model's sizing or its first request.
TORCHVISION_STUB = Path(__file__).resolve().parent / "kv_groundtruth_stubs"
NEEDS_TORCHVISION = frozenset({"qwen3.5-27b", "qwen3.5-35b-a3b"})


def engine_env(name: str) -> dict[str, str] | None:
    return {"PYTHONPATH": str(TORCHVISION_STUB)} if name in NEEDS_TORCHVISION else None


def case_id(name: str, kv_bytes: int, max_len: int) -> str:
    return f"CPU-{name}-{kv_bytes // MIB}M-{max_len}"


def vllm_command() -> list[str]:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "vllm.sh"), "--path"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return out.split()


def vllm_python(vllm: str) -> str:
    return str(Path(vllm).with_name("python"))


def prepare(shape: shapes_mod.Shape, python: str) -> Path:
    """The model folder: its config.json, random weights and the demo tokenizer (once)."""
    out = WORK / "models" / shape.name
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(shape.config, indent=2, sort_keys=True) + "\n"
    config = out / "config.json"
    if not config.exists() or config.read_text() != text:
        for f in out.glob("*.safetensors*"):
            f.unlink()
        config.write_text(text)
    if not any(out.glob("*.safetensors")):
        subprocess.run(
            [python, str(ROOT / "bench" / "kv_groundtruth_write.py"), str(out)], check=True
        )
    return out


def load_results() -> dict[str, dict[str, object]]:
    if not RESULTS.exists():
        return {}
    data: dict[str, dict[str, object]] = json.loads(RESULTS.read_text())
    return data


def record(key: str, value: dict[str, object]) -> None:
    data = load_results()
    data[key] = value
    RESULTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def run_cases(only: str | None) -> None:
    vllm = vllm_command()
    python = vllm_python(vllm[0])
    done = load_results()
    asked: set[str] = {str(v["model"]) for v in done.values() if v.get("first_request")}
    for name, kv_bytes, max_len in CASES:
        key = case_id(name, kv_bytes, max_len)
        if (only and name != only) or (not only and key in done):
            continue
        shape = shapes_mod.shape(name)
        try:
            model = prepare(shape, python)
        except subprocess.CalledProcessError as exc:
            record(key, {"model": name, "kv_bytes": kv_bytes, "max_len": max_len,
                         "error": f"transformers could not build it: {exc}"})  # fmt: skip
            continue
        log = WORK / "logs" / f"{key}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        ask = name not in asked
        s = run.start(vllm[0], model, kv_bytes=kv_bytes, max_len=max_len, port=PORT, log=log,
                      ask=ask, env=engine_env(name))  # fmt: skip
        asked.add(name)
        result = {"model": name, "kv_bytes": kv_bytes, "max_len": max_len, **run.as_dict(s)}
        record(key, result)
        print(f"{key}: tokens {s.kv_tokens} x{s.concurrency} blocks {s.group_block_sizes} "
              f"lcm {s.lcm_block_size} rss {s.rss_mib} MiB {s.seconds} s "
              f"{s.error or ''} {s.first_request}", flush=True)  # fmt: skip


def main(argv: list[str]) -> int:
    if "--export" in argv:
        import kv_groundtruth_cases

        kv_groundtruth_cases.export(load_results())
        return 0
    if "--table" in argv:
        import kv_groundtruth_cases

        return kv_groundtruth_cases.table()
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    # a stopped run still stops its vLLM (kv_groundtruth_run.start's finally)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    run_cases(only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
