"""GGUF in the catalog: the demo model as GGUF, local .gguf files, Hub repos read by range."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import HfApi

from deployments.catalog.gguf_hub import GgufHub, gguf_choices, hub_gguf_spec
from deployments.catalog.gguf_local import list_local_gguf, local_spec, resolve_local_gguf
from deployments.catalog.gguf_read import local_gguf_spec, read_header
from deployments.catalog.gguf_sources import resolve_gguf
from deployments.catalog.gguf_write import LlamaShape, convert_demo, write_random_llama
from deployments.catalog.local import LocalModelError
from deployments.catalog.sources import ModelSourceError
from tests.support.gguf_models import BigLlama, big_llama_header, gguf_repo
from tests.support.hubstub.server import HubStub

REPO = "sbtest/Big-Llama-GGUF"


@pytest.fixture(scope="session")
def demo_gguf(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_demo(tiny_model, tmp_path_factory.mktemp("gguf") / "demo-Q8_0.gguf")


def test_demo_model_as_gguf_keeps_its_shape_and_tokenizer(demo_gguf: Path):
    header = read_header(demo_gguf)
    spec = local_gguf_spec(demo_gguf)
    assert (spec.block_count, spec.embedding_length, spec.head_count) == (2, 128, 2)
    assert spec.head_count_kv == (1, 1) and spec.key_length == 64
    assert spec.context_length == 512 and spec.file_type == "Q8_0"
    assert spec.tied_output  # tied embeddings: no output.weight, llama.cpp reuses token_embd
    assert header.metadata["tokenizer.ggml.model"] == "gpt2"
    assert len(header.metadata["tokenizer.ggml.tokens"]) == spec.vocab_size == 384  # type: ignore[arg-type]
    assert spec.file_tensor_bytes + header.data_offset <= demo_gguf.stat().st_size


def test_local_gguf_files_are_listed_split_parts_as_one(tmp_path: Path):
    root = tmp_path / "models"
    write_random_llama(root / "tiny" / "tiny-Q8_0.gguf", LlamaShape())
    for part in (1, 2):  # two halves of one model, as gguf-split names them
        write_random_llama(
            root / "big" / f"big-F16-0000{part}-of-00002.gguf", LlamaShape(), quant="F16"
        )
    (root / "tiny" / "mmproj-tiny-f16.gguf").write_bytes(b"GGUF")  # a vision projector
    found = list_local_gguf([root])
    assert [(m.name, m.quant, m.parts) for m in found] == [
        ("big-F16", "F16", 2),
        ("tiny-Q8_0", "Q8_0", 1),
    ]
    big = found[0]
    assert big.relative_path == "big/big-F16-00001-of-00002.gguf"
    assert big.size_bytes == sum(p.stat().st_size for p in (root / "big").iterdir())
    spec = local_spec(0, big.relative_path, roots=[root])
    assert spec.block_count == 2  # each part's tensors counted once, the metadata of the first


def test_local_gguf_paths_stay_inside_the_root(tmp_path: Path):
    root, outside = tmp_path / "models", tmp_path / "elsewhere"
    write_random_llama(outside / "x-Q8_0.gguf", LlamaShape())
    root.mkdir()
    (root / "link.gguf").symlink_to(outside / "x-Q8_0.gguf")
    for bad in ("../elsewhere/x-Q8_0.gguf", "/etc/passwd", "link.gguf"):
        with pytest.raises(LocalModelError):
            resolve_local_gguf(0, bad, roots=[root])
    assert list_local_gguf([root]) == ()


@pytest.fixture
def gguf_hub(tmp_path: Path, demo_gguf: Path) -> Iterator[HubStub]:
    header, size = big_llama_header(tmp_path / "big.gguf", BigLlama())
    part_header, part_size = big_llama_header(tmp_path / "part.gguf", BigLlama(layers=40))
    demo = demo_gguf.read_bytes()
    stub = HubStub().start()
    stub.add_repo(
        gguf_repo(
            REPO,
            {
                "Big-Llama-Q4_K_M.gguf": (header, size),
                "Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf": (part_header, part_size),
                "Q8_0/Big-Llama-Q8_0-00002-of-00002.gguf": (part_header, part_size),
                "mmproj-Big-Llama-F16.gguf": (demo, len(demo)),
                "demo-Q8_0.gguf": (demo, len(demo)),
                "README.md": (b"# GGUF", 6),
            },
        )
    )
    yield stub
    stub.stop()


def test_a_hub_gguf_repo_lists_one_choice_per_quantization(gguf_hub: HubStub):
    info = HfApi(endpoint=gguf_hub.url).model_info(REPO, files_metadata=True)
    choices = gguf_choices((s.rfilename, s.size) for s in info.siblings or [])
    assert [(c.quant, len(c.files)) for c in choices] == [("Q8_0", 1), ("Q4_K_M", 1), ("Q8_0", 2)]
    split = choices[2]
    assert split.first == "Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf"
    assert split.size_bytes == sum(
        s.size or 0 for s in info.siblings or [] if "Q8_0/" in s.rfilename
    )


def test_a_hub_gguf_spec_comes_from_ranged_reads_of_the_header_only(gguf_hub: HubStub):
    client = GgufHub(gguf_hub.url)
    info = HfApi(endpoint=gguf_hub.url).model_info(REPO, files_metadata=True)
    choices = {c.first: c for c in gguf_choices((s.rfilename, s.size) for s in info.siblings or [])}
    gguf_hub.reset_requests()
    spec = hub_gguf_spec(client, REPO, choices["Big-Llama-Q4_K_M.gguf"])
    assert spec.block_count == 80 and spec.vocab_size == 128256
    assert spec.file_type == "Q4_K_M" and not spec.tied_output
    assert 0.54 < spec.input_bytes / (1 << 30) < 0.56  # token_embd Q4_K: on the CPU
    assert 0.79 < spec.output_bytes / (1 << 30) < 0.81  # output Q6_K: on the last GPU
    reads = [r for r in gguf_hub.requests if "/resolve/" in r.path]
    assert [r.range for r in reads] == ["bytes=0-1048575"]  # 1 MiB of a 42 GiB file
    split = hub_gguf_spec(client, REPO, choices["Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf"])
    assert split.block_count == 40  # the parts' tensors together, the first part's metadata


def test_a_gguf_reference_names_a_repo_and_a_quantization(gguf_hub: HubStub):
    hub = GgufHub(gguf_hub.url)
    source, spec = resolve_gguf(f"{REPO}:Q4_K_M", hub=hub)
    assert source.engine_model == "Big-Llama-Q4_K_M.gguf" and not source.is_local
    assert spec.block_count == 80
    split, _ = resolve_gguf(f"{REPO}:Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf", hub=hub)
    assert split.files == (
        "Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf",
        "Q8_0/Big-Llama-Q8_0-00002-of-00002.gguf",
    )
    with pytest.raises(ModelSourceError, match="several Q8_0 files"):
        resolve_gguf(f"{REPO}:Q8_0", hub=hub)  # the demo file and the split model
    with pytest.raises(ModelSourceError, match=r"no GGUF file 'Q2_K'.*Q4_K_M"):
        resolve_gguf(f"{REPO}:Q2_K", hub=hub)
    with pytest.raises(ModelSourceError, match="No model"):
        resolve_gguf("sbtest/absent:Q4_K_M", hub=hub)


def test_a_local_gguf_reference(tmp_path: Path, settings):
    root = tmp_path / "models"
    write_random_llama(root / "tiny" / "tiny-Q8_0.gguf", LlamaShape(layers=3))
    settings.MODEL_ROOTS = [root]
    source, spec = resolve_gguf("local:0/tiny/tiny-Q8_0.gguf")
    assert source.is_local and source.engine_model == str(root / "tiny" / "tiny-Q8_0.gguf")
    assert spec.block_count == 3
    with pytest.raises(ModelSourceError):
        resolve_gguf("local:0/../outside.gguf")


def test_manage_demo_model_also_writes_the_gguf(tmp_path: Path, settings, tiny_model: Path):
    import shutil

    from django.core.management import call_command

    from deployments.management.commands.demo_model import DEMO_GGUF, DEMO_MODEL_DIR

    shutil.copytree(tiny_model, tmp_path / DEMO_MODEL_DIR)  # already generated: not again
    settings.MODEL_ROOTS = [tmp_path]
    call_command("demo_model")
    [found] = list_local_gguf([tmp_path])
    assert found.relative_path == DEMO_GGUF and found.quant == "Q8_0"
    assert local_spec(0, found.relative_path, roots=[tmp_path]).vocab_size == 384


def test_the_demo_gguf_on_four_free_gpus_plans_on_one(demo_gguf: Path):
    """As an operator would choose (issue 38): it fits one GPU with the context and slots
    asked, so one GPU with -sm none; no plan leases a GPU it gives nothing."""
    from deployments.catalog.plan_cli import run_plan

    out = json.loads(run_plan({"model": str(demo_gguf), "gpus": "4x80GiB@nvlink", "json": True}))
    best = out["plans"][0]
    assert best["fits"] and best["gpus"] == 1 and best["split_mode"] == "none"
    assert "-sm" in best["flags"] and best["flags"][best["flags"].index("-sm") + 1] == "none"
    assert "no split" in best["note"]
    for plan in out["plans"]:
        assert all(d["weights_bytes"] > 0 for d in plan["devices"]), plan["tensor_split"]
        assert 0.0 not in plan["tensor_split"]
    splits = [p for p in out["plans"] if p["gpus"] > 1]
    assert splits and all("buys nothing" in p["note"] for p in splits)
