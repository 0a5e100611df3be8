"""GGUF on the Models pages: the local list, a Hub repo's quantizations, the llama.cpp plan
panel and its JSON view (page endpoint, ``manage.py plan --json``, ``/api/v1/plan``)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from deployments import planning
from deployments.catalog.gguf_plan import GgufOptions, parse_tensor_split, plan_json
from deployments.catalog.gguf_read import local_gguf_spec
from deployments.catalog.gguf_write import LlamaShape, write_random_llama
from deployments.catalog.plan_cli import PlanCliError, run_plan
from deployments.models import Deployment
from monitoring.models import Gpu, Host
from tests.support.catalog import login_client
from tests.support.gguf_models import BigLlama, big_llama_header, gguf_repo
from tests.support.hubstub.server import HubStub

TWO_GPUS = "1x24GiB@pcie,1x16GiB@pcie"
TINY = "local:0/tiny/tiny-Q8_0.gguf"
BIG = "local:0/big/big-Q4_K_M.gguf"
REPO = "sbtest/Big-Llama-GGUF"
GIB = 1 << 30


def sparse_big_llama(path: Path) -> Path:
    """A 70B-shaped Q4_K_M file: its real header, the data a hole (no disk used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _, size = big_llama_header(path, BigLlama())
    os.truncate(path, size)
    return path


@pytest.fixture
def gguf_root(tmp_path: Path, settings: Any) -> Path:
    root = tmp_path / "models"
    write_random_llama(root / "tiny" / "tiny-Q8_0.gguf", LlamaShape())
    sparse_big_llama(root / "big" / "big-Q4_K_M.gguf")
    settings.MODEL_ROOTS = [root]
    return root


def two_gpus() -> planning.Inventory:
    return planning.one_machine(planning.parse_gpus(TWO_GPUS))


# -- the JSON view ----------------------------------------------------------------------------


def test_the_json_view_of_a_two_gpu_layer_split(gguf_root: Path) -> None:
    spec = local_gguf_spec(gguf_root / "tiny" / "tiny-Q8_0.gguf")
    request = GgufOptions().request()
    plans = planning.plan_llamacpp(spec, two_gpus(), request)
    assert len(plans[0].gpus) == 1  # one card holds the tiny model: the split ranks lower
    best = next(p for p in plans if len(p.gpus) == 2)
    out = plan_json(best, spec, request)
    assert out["engine"] == "llama.cpp" and out["fits"] and out["split_mode"] == "layer"
    assert "buys nothing" in out["note"]
    assert out["gpus"] == 2 and len(set(out["tensor_split"])) == 2  # unequal cards: unequal -ts
    assert not out["tensor_split_pinned"] and out["partial_offload"] is None
    gpu0, gpu1 = out["devices"]
    assert gpu0["layers"] + gpu1["layers"] == spec.block_count
    assert [gpu0["layers"], gpu1["layers"]] == [int(s) for s in out["tensor_split"][:1]] + [
        int(out["tensor_split"][1]) - 1  # the output layer is the last GPU's share too
    ]
    assert gpu1["holds_output"] and not gpu0["holds_output"]
    assert gpu0["total_bytes"] == 24 * GIB and gpu1["total_bytes"] == 16 * GIB
    for d in out["devices"]:
        parts = ("weights_bytes", "kv_bytes", "compute_bytes", "overhead_bytes")
        assert d["used_bytes"] == sum(d[k] for k in parts)
        assert d["left_bytes"] == d["free_bytes"] - d["used_bytes"]
    cpu = out["cpu"]
    assert cpu["token_embd_bytes"] == spec.input_bytes == cpu["weights_bytes"]
    assert cpu["output_buffer_bytes"] == spec.vocab_size * 4  # one slot's logits
    ts = out["flags"][out["flags"].index("-ts") + 1]
    assert ts == ",".join(str(int(s)) for s in out["tensor_split"])
    json.dumps(out)  # plain JSON all through


def test_pinned_ratios_are_kept_and_said(gguf_root: Path) -> None:
    spec = local_gguf_spec(gguf_root / "tiny" / "tiny-Q8_0.gguf")
    request = GgufOptions(tensor_split=parse_tensor_split("1,1")).request()
    out = plan_json(planning.plan_llamacpp(spec, two_gpus(), request)[0], spec, request)
    assert out["tensor_split"] == [1.0, 1.0] and out["tensor_split_pinned"]
    for bad in ("a,b", "0,0", "-1,2", "nan,1", "1e400,1"):
        with pytest.raises(planning.PlanningError):
            parse_tensor_split(bad)
    assert parse_tensor_split(" ") is None and parse_tensor_split("60/40") == (60.0, 40.0)


def test_partial_offload_only_when_allowed_with_its_cost(gguf_root: Path) -> None:
    spec = local_gguf_spec(gguf_root / "big" / "big-Q4_K_M.gguf")
    refused = GgufOptions(context_tokens=8192).request()
    out = plan_json(planning.plan_llamacpp(spec, two_gpus(), refused)[0], spec, refused)
    assert not out["fits"] and out["gpu_layers"] == spec.block_count + 1
    assert out["partial_offload"] is None and "needs" in out["reasons"][0]
    allowed = GgufOptions(context_tokens=8192, allow_partial_offload=True).request()
    out = plan_json(planning.plan_llamacpp(spec, two_gpus(), allowed)[0], spec, allowed)
    cost = out["partial_offload"]
    assert out["fits"] and out["gpu_layers"] < spec.block_count + 1
    assert cost["cpu_blocks"] == spec.block_count + 1 - out["gpu_layers"]
    assert cost["cpu_layer_bytes"] == out["cpu"]["weights_bytes"] - spec.input_bytes
    assert f"-ngl {out['gpu_layers']} of 81" in cost["text"] and "fewer tokens/s" in cost["text"]


# -- pages and the panel's endpoint -----------------------------------------------------------


def test_local_gguf_files_are_in_the_local_list(client: Client, viewer: Any, gguf_root: Path):
    login_client(client, viewer)
    html = client.get("/models/").content.decode()
    assert 'href="/models/gguf/local/0/tiny/tiny-Q8_0.gguf/"' in html
    assert 'data-model="models/big/big-Q4_K_M.gguf"' in html and "GGUF Q4_K_M" in html


def test_a_local_gguf_page_shows_the_llamacpp_plan(client: Client, viewer: Any, gguf_root: Path):
    login_client(client, viewer)
    response = client.get("/models/gguf/local/0/tiny/tiny-Q8_0.gguf/")
    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-arch="blocks">2<' in html and "Plan on llama.cpp" in html
    assert "what-if 1x24GiB@pcie" in html and "one GPU, no split" in html  # the default
    assert 'id="plan-devices"' in html and "GPU 0 · GPU 24GiB" in html
    assert "launch-button" not in html  # a viewer has no Launch
    assert client.get("/models/gguf/local/0/tiny/absent.gguf/").status_code == 404
    assert client.get("/models/gguf/local/0/../outside.gguf/").status_code == 404


def test_launch_waits_for_a_registered_host(client: Client, operator: Any, gguf_root: Path) -> None:
    login_client(client, operator)
    html = client.get("/models/gguf/local/0/tiny/tiny-Q8_0.gguf/").content.decode()
    assert 'id="launch-button" disabled' in html  # no host registered: a what-if plan
    assert "Pick a registered host to launch." in html
    assert 'name="engine" value="llamacpp"' in html and 'name="name" value="tiny-q8-0"' in html


def test_launch_posts_the_split_the_plan_chose_on_a_host(
    client: Client, operator: Any, gguf_root: Path
) -> None:
    """A host of two unequal GPUs: the tiny model goes on one; with a split pinned, Launch
    carries the plan's GPUs and -ts, and the deployment it creates runs with exactly them."""
    host = Host.objects.create(
        name="pair", queue="host.pair", backend="nvml", last_heartbeat=timezone.now()
    )
    for index, gib in enumerate((24, 16)):
        Gpu.objects.create(
            host=host,
            index=index,
            uuid=f"GPU-pair-{index}",
            name="RTX",
            memory_total_bytes=gib << 30,
        )
    login_client(client, operator)
    html = client.get("/models/gguf/local/0/tiny/tiny-Q8_0.gguf/").content.decode()
    assert 'id="launch-button" >' in html or 'id="launch-button">' in html
    one = client.get("/models/plan/gguf/", {"ref": TINY, "target": "pair"}).json()["plan"]
    assert one["gpus"] == 1 and one["split_mode"] == "none"
    assert one["launch_note"] == "Launch starts llama-server on GPU 0."
    query = {"ref": TINY, "target": "pair", "tensor_split": "2,1"}
    payload = client.get("/models/plan/gguf/", query).json()
    plan, launch = payload["plan"], payload["plan"]["launch"]
    assert (
        launch["engine"] == "llamacpp" and launch["host"] == "pair" and launch["model_ref"] == TINY
    )
    assert launch["gpus"] == "0,1" and launch["tensor_split"] == plan["tensor_split_text"]
    assert len(set(plan["tensor_split"])) == 2
    assert (
        plan["launch_note"]
        == f"Launch starts llama-server on GPU 0, 1, -ts {launch['tensor_split']}."
    )
    response = client.post("/deployments/new/", {**launch, "name": "pair-tiny"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    d = Deployment.objects.get(name="pair-tiny")
    args = d.snapshot.engine_args
    assert d.engine == "llamacpp" and d.snapshot.gpu_indices == (0, 1)
    assert args.split_mode == "layer" and args.tensor_split == tuple(plan["tensor_split"])
    argv = d.planned_argv
    assert argv[argv.index("-ts") + 1] == launch["tensor_split"]


def test_the_plan_endpoint_answers_for_the_two_gpu_target(
    client: Client, viewer: Any, gguf_root: Path
) -> None:
    login_client(client, viewer)
    query = {"ref": TINY, "target": "whatif", "gpus": TWO_GPUS}
    one = client.get("/models/plan/gguf/", query).json()["plan"]
    assert one["split_text"] == "one GPU, no split" and "no split (-sm none)" in one["note"]
    response = client.get("/models/plan/gguf/", {**query, "tensor_split": "2,1"})
    assert response.status_code == 200
    payload = response.json()
    plan = payload["plan"]
    assert payload["ok"] and payload["engine"] == "llama.cpp"
    assert payload["target"]["label"] == f"what-if {TWO_GPUS}"
    assert plan["split_text"].startswith("layer split over 2 GPUs, -ts 2,1")
    assert len(set(plan["tensor_split"])) == 2 and "pinned by you" in plan["split_text"]
    assert [r["device"].split(" · ")[0] for r in plan["rows"]] == ["GPU 0", "GPU 1", "CPU"]
    assert plan["chart"]["capacity_gib"] == [24.0, 16.0]
    assert plan["rows"][0]["other"] == "0.50 GiB"  # the CUDA context the planner counts
    assert plan["rows"][2]["weights"].endswith(" KiB")  # a tiny embedding does not read 0.00
    # the copy-paste lines come from the llama-server adapter, with the plan's placement
    line = plan["commands"]["llamacpp"].split()
    assert line[:3] == ["llama-server", "-m", str(gguf_root / "tiny" / "tiny-Q8_0.gguf")]
    assert line[line.index("-ts") + 1] == plan["tensor_split_text"]
    assert line[line.index("-ngl") + 1] == "3" and line[line.index("-c") + 1] == "2048"
    docker = shlex.split(plan["commands"]["docker"])
    assert docker[docker.index("--gpus") + 1] == '"device=0,1"'  # as the adapter's test has it
    pinned = client.get(
        "/models/plan/gguf/", {"ref": TINY, "gpus": TWO_GPUS, "tensor_split": "1,1"}
    ).json()["plan"]
    assert "-ts 1,1 (pinned by you)" in pinned["split_text"]
    bad = client.get("/models/plan/gguf/", {"ref": TINY, "gpus": TWO_GPUS, "tensor_split": "1"})
    assert bad.status_code == 400 and "shares for 2 GPUs" in bad.json()["error"]


def test_a_model_too_big_is_refused_unless_partial_offload_is_allowed(
    client: Client, viewer: Any, gguf_root: Path
) -> None:
    login_client(client, viewer)
    query = {"ref": BIG, "gpus": TWO_GPUS, "context_tokens": "8192"}
    refused = client.get("/models/plan/gguf/", query)
    assert refused.status_code == 422
    assert "Allowing partial offload" in refused.json()["error"]
    allowed = client.get("/models/plan/gguf/", {**query, "allow_partial_offload": "on"})
    assert allowed.status_code == 200
    plan = allowed.json()["plan"]
    assert "Partial offload: -ngl" in plan["partial_offload"]["text"]
    assert f"-ngl {plan['gpu_layers']} " in plan["commands"]["llamacpp"]


@pytest.fixture
def gguf_hub(tmp_path: Path, settings: Any) -> Iterator[HubStub]:
    header, size = big_llama_header(tmp_path / "big.gguf", BigLlama())
    part, part_size = big_llama_header(tmp_path / "part.gguf", BigLlama(layers=40))
    stub = HubStub().start()
    stub.add_repo(
        gguf_repo(
            REPO,
            {
                "Big-Llama-Q4_K_M.gguf": (header, size),
                "Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf": (part, part_size),
                "Q8_0/Big-Llama-Q8_0-00002-of-00002.gguf": (part, part_size),
                "README.md": (b"# GGUF", 6),
            },
        )
    )
    settings.HF_ENDPOINT = stub.url
    settings.HF_TOKEN = ""
    yield stub
    stub.stop()


def test_a_hub_gguf_repo_lists_its_quantizations_and_plans_the_picked_one(
    client: Client, viewer: Any, gguf_hub: HubStub
) -> None:
    login_client(client, viewer)
    html = client.get(f"/models/gguf/{REPO}/").content.decode()
    assert html.count("<tr class=") == 2  # one row per quantization, the split one as one
    assert 'data-quant="Q4_K_M"' in html and 'data-quant="Q8_0"' in html
    assert "Plan on llama.cpp" not in html  # nothing planned before a pick
    picked = "Q8_0/Big-Llama-Q8_0-00001-of-00002.gguf"
    assert f"?file={picked.replace('/', '%2F')}" in html or f"?file={picked}" in html
    page = client.get(f"/models/gguf/{REPO}/", {"file": picked})
    html = page.content.decode()
    assert page.status_code == 200 and "planned below" in html and "(2 parts)" in html
    assert 'data-arch="blocks">40<' in html and "Plan on llama.cpp" in html
    assert client.get("/models/gguf/sbtest/absent/").status_code == 404


# -- manage.py plan and the API ---------------------------------------------------------------


def test_manage_plan_json_for_a_gguf_file(gguf_root: Path) -> None:
    path = gguf_root / "tiny" / "tiny-Q8_0.gguf"
    out = json.loads(run_plan({"model": str(path), "gpus": TWO_GPUS, "json": True}))
    assert out["engine"] == "llama.cpp" and out["block_count"] == 2
    best = out["plans"][0]
    assert best["gpus"] == 1 and best["split_mode"] == "none"  # one card holds it
    assert [p["gpus"] for p in out["plans"]] == [1, 1, 2]  # each card alone, then the split
    assert len(set(out["plans"][2]["tensor_split"])) == 2  # unequal cards: unequal -ts
    text = run_plan({"model": str(path), "gpus": TWO_GPUS, "tensor_split": "2,1"})
    assert "-ts 2,1 (pinned by you)" in text and "flags: -c 2048" in text
    with pytest.raises(PlanCliError, match="tensor split"):
        run_plan({"model": str(path), "gpus": TWO_GPUS, "tensor_split": "x"})


def test_the_api_plan_endpoint_returns_the_llamacpp_plan(
    client: Client, viewer: Any, gguf_root: Path
) -> None:
    login_client(client, viewer)
    response = client.get("/api/v1/plan", {"ref": TINY, "gpus": TWO_GPUS})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["ok"] and body["plan"]["engine"] == "llama.cpp"
    assert len(body["plan"]["devices"]) == 1 and body["plan"]["cpu"]["device"] == "CPU"
    flags = body["plan"]["flags"]
    assert flags[flags.index("-sm") + 1] == "none" and body["plan"]["note"]
    refused = client.get("/api/v1/plan", {"ref": BIG, "gpus": TWO_GPUS, "context_tokens": 8192})
    assert refused.status_code == 200 and not refused.json()["ok"]
    doc = client.get("/api/v1/openapi.json").json()
    assert "LlamaCppPlanOut" in doc["components"]["schemas"]


def test_a_gguf_only_repo_page_links_to_its_quantizations(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    repo = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"
    html = client.get(f"/models/{repo}/").content.decode()
    assert "data-spec-error" in html  # vLLM cannot plan it: no config.json
    assert f'href="/models/gguf/{repo}/"' in html


def test_a_registered_host_is_planned_as_it_is(
    client: Client, viewer: Any, gguf_root: Path, sim_host: Any
) -> None:
    login_client(client, viewer)
    html = client.get("/models/gguf/local/0/tiny/tiny-Q8_0.gguf/").content.decode()
    assert '<b id="plan-target">sim-a</b>' in html  # the online host, before any what-if
    payload = client.get("/models/plan/gguf/", {"ref": TINY, "target": "sim-a"}).json()
    plan = payload["plan"]
    assert payload["target"]["simulated"] and plan["host"] == "sim-a" and plan["gpus"] == 1
    assert [d["total_bytes"] for d in plan["devices"]] == [80 * GIB]
    assert "llama-server on this host's CPU" in plan["launch_note"]
    assert plan["launch"]["gpus"] == plan["launch"]["tensor_split"] == ""  # the CPU, not 2 GPUs
