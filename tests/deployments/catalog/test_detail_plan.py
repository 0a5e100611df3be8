"""Model detail pages and the plan endpoint: numbers, commands, bad input, launch form."""

from __future__ import annotations

import html as htmllib
import json
import re
from typing import Any

from django.test import Client

from deployments import planning
from deployments.lifecycle.forms import LaunchForm
from monitoring.models import Host
from tests.support.catalog import BIG, QWEN, login_client
from tests.support.hubstub import HubStub

LAUNCH_FIELDS = {
    "name", "model_ref", "revision", "host", "engine", "tensor_parallel_size",
    "pipeline_parallel_size", "max_model_len", "max_num_seqs", "dtype", "quantization",
    "kv_cache_dtype", "gpu_memory_utilization", "concurrency", "replicas", "placement",
    "learned_correction", "device", "kv_cache_bytes", "csrfmiddlewaretoken",
}  # fmt: skip


def arch(html: str, label: str) -> str:
    match = re.search(rf'data-arch="{label}">([^<]*)<', html)
    assert match, label
    return match[1]


def plan(client: Client, **params: Any) -> tuple[int, dict[str, Any]]:
    response = client.get("/models/plan/", {"ref": QWEN, **params})
    return response.status_code, response.json()


def expected_plan(spec_source: str, gpus: str, **overrides: Any) -> planning.Plan:
    from deployments.catalog.hubaccess import hub_client
    from deployments.catalog.selectors import spec_from_card

    spec = spec_from_card(hub_client().model_info(spec_source))
    req = planning.PlanRequest(model=spec_source, **overrides)
    best = planning.plan(spec, planning.parse_gpus(gpus, host="what-if"), req).best
    assert best is not None
    return best


def test_detail_numbers(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    response = client.get(f"/models/{QWEN}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert arch(html, "layers") == "28"
    assert arch(html, "hidden-size") == "3584"
    assert arch(html, "attention-heads") == "28"
    assert arch(html, "kv-heads") == "4"
    assert arch(html, "head-dim") == "128"
    assert '<td data-field="weights">14.2 GiB</td>' in html
    assert '<td data-field="parameters">7.62B</td>' in html
    best = expected_plan(QWEN, "4x80GiB@nvlink")  # no host registered: the what-if default
    assert f'data-value="{best.kv_cache_tokens}">{best.kv_cache_tokens:,}<' in html
    assert "what-if 4x80GiB@nvlink" in html
    assert htmllib.escape("vllm serve Qwen/Qwen2.5-7B-Instruct --tensor-parallel-size 1") in html
    assert 'id="plan-data"' in html  # the JSON the chart is drawn from


def test_moe_experts_shown(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    html = client.get("/models/deepseek-ai/DeepSeek-V2-Lite-Chat/").content.decode()
    assert arch(html, "experts").startswith("64 (6 per token)")


def test_unknown_model_is_a_message(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    response = client.get("/models/nobody/no-such-model/")
    assert response.status_code == 404
    assert "No model nobody/no-such-model on the Hub" in response.content.decode()
    response = client.get(f"/models/{QWEN}/", {"revision": "no-such-branch"})
    assert response.status_code == 404
    assert "has no revision" in response.content.decode()


def test_gated_without_token_says_what_to_do(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    html = client.get("/models/meta-llama/Llama-3.1-8B-Instruct/").content.decode()
    assert "data-spec-error" in html and "request access on" in html
    assert 'id="plan-panel"' not in html


def test_plan_endpoint_json(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    status, data = plan(client, target="whatif", gpus="4x80GiB@nvlink", tensor_parallel_size="2")
    assert status == 200 and data["ok"] and data["error"] is None
    p = data["plan"]
    assert (p["tensor_parallel_size"], p["pipeline_parallel_size"], p["replicas"]) == (2, 1, 2)
    best = expected_plan(QWEN, "4x80GiB@nvlink", tensor_parallel_size=2)
    assert p["kv_cache_tokens"] == best.kv_cache_tokens
    for gpu in p["per_gpu"]:
        parts = ("weights", "activation", "non_torch", "cuda_graph", "kv_cache")
        assert sum(gpu[f"{k}_bytes"] for k in parts) == gpu["total_bytes"]
        assert gpu["total_bytes"] <= gpu["budget_bytes"] <= gpu["gpu_total_bytes"]
    assert [s["name"] for s in p["chart"]["parts"]] == [
        "Weights",
        "Activations",
        "Non-torch",
        "CUDA graphs",
        "KV cache",
    ]
    assert len(p["chart"]["labels"]) == 2
    assert p["commands"]["vllm"].startswith("vllm serve Qwen/Qwen2.5-7B-Instruct")
    assert "--tensor-parallel-size 2" in p["commands"]["vllm"]
    docker = p["commands"]["docker"].splitlines()
    assert len(docker) == 2
    assert "--gpus '\"device=0,1\"'" in docker[0] and "-p 8000:8000" in docker[0]
    assert "--gpus '\"device=2,3\"'" in docker[1] and "-p 8001:8000" in docker[1]
    assert '-v "$HOME/.cache/huggingface:/root/.cache/huggingface"' in docker[0]
    assert "--env HF_TOKEN vllm/vllm-openai:v" in docker[0]
    k8s = p["commands"]["kubernetes"]
    assert "kind: Deployment" in k8s and "nvidia.com/gpu: 2}" in k8s and "replicas: 2" in k8s
    alternatives = data["alternatives"]
    assert alternatives[0]["chosen"] and sum(a["chosen"] for a in alternatives) == 1
    assert "plan;dur=" in client.get("/models/plan/", {"ref": QWEN})["Server-Timing"]


def test_yaml_manifest_parses(client: Client, viewer: Any, hub: HubStub) -> None:
    yaml = __import__("pytest").importorskip("yaml")
    login_client(client, viewer)
    _, data = plan(client, tensor_parallel_size="4")
    doc = yaml.safe_load(data["plan"]["commands"]["kubernetes"])
    container = doc["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert container["args"][0] == QWEN and "--tensor-parallel-size" in container["args"]


def test_tp_not_dividing_heads(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    status, data = plan(client, gpus="4x80GiB", tensor_parallel_size="3")
    assert status == 422 and not data["ok"]
    assert "attention heads (28) must be divisible by tensor parallel size (3)" in data["error"]
    rejected = [a for a in data["alternatives"] if a["tensor_parallel_size"] == 3]
    assert rejected and not rejected[0]["fits"]


def test_context_too_long(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    status, data = plan(client, max_model_len="1000000")
    assert status == 422
    assert "This model allows at most 32768 tokens" in data["error"]
    status, data = plan(client, ref=BIG, gpus="1x80GiB", max_model_len="32768")
    assert status == 422
    match = re.search(r"What fits here: a context of at most (\d+) tokens", data["error"])
    assert match
    fits = int(match[1])
    # vLLM 0.33 holds one block back (the null block): one block short of the whole cache
    assert 0 < fits <= data["plan"]["kv_cache_tokens"] - 16 < 32768
    status, data = plan(client, ref=BIG, gpus="1x80GiB", max_model_len=str(fits))
    assert status == 200 and data["plan"]["max_model_len"] == fits


def test_bad_input_messages(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    cases = [
        ({"tensor_parallel_size": "two"}, "tensor parallel size: Enter a whole number."),
        ({"gpu_memory_utilization": "1.5"}, "gpu memory utilization"),
        ({"gpus": "lots of GPUs"}, "unreadable --gpus"),
        ({"target": "no-such-host"}, "There is no registered host 'no-such-host'"),
        ({"ref": "../etc/passwd"}, "is not a Hub id"),
        ({"ref": "local:0/../../etc"}, "contains '..'"),
        ({"kv_cache_dtype": "int3"}, "kv cache dtype"),
    ]
    for params, message in cases:
        status, data = plan(client, **params)
        assert status == 400, params
        assert message in data["error"], (params, data["error"])
    status, data = plan(client, ref="nobody/missing")
    assert status == 404 and "No model nobody/missing" in data["error"]


def test_viewer_sees_no_launch(client: Client, viewer: Any, hub: HubStub, sim_host: Host) -> None:
    login_client(client, viewer)
    html = client.get(f"/models/{QWEN}/").content.decode()
    assert 'id="plan-panel"' in html and 'id="launch-form"' not in html
    assert "Launch this plan" not in html
    response = client.post("/deployments/new/", {"name": "x", "model_ref": QWEN, "host": "sim-a"})
    assert response.status_code == 403


def test_operator_launch_form(client: Client, operator: Any, hub: HubStub, sim_host: Host) -> None:
    login_client(client, operator)
    html = client.get(f"/models/{QWEN}/").content.decode()
    form = html.split('id="launch-form"')[1].split("</form>")[0]
    fields = dict(re.findall(r'name="([a-z_]+)" value="([^"]*)"', form))
    assert set(fields) == LAUNCH_FIELDS
    assert fields["host"] == "sim-a" and fields["model_ref"] == QWEN and fields["engine"] == "vllm"
    assert fields["tensor_parallel_size"] == "1" and fields["name"] == "qwen2-5-7b-instruct"
    assert "disabled" not in form.split('id="launch-button"')[1].split(">")[0]
    assert "simulated GPUs" in html
    fields.pop("csrfmiddlewaretoken")
    launch = LaunchForm(data=fields)
    assert launch.is_valid(), launch.errors


def test_whatif_cannot_launch(client: Client, operator: Any, hub: HubStub) -> None:
    login_client(client, operator)
    html = client.get(f"/models/{QWEN}/").content.decode()
    button = html.split('id="launch-button"')[1].split(">")[0]
    assert "disabled" in button and "Pick a registered host to launch." in html


def test_plan_on_registered_host(client: Client, viewer: Any, hub: HubStub, sim_host: Host) -> None:
    login_client(client, viewer)
    status, data = plan(client, target="sim-a")
    assert status == 200
    assert data["target"] == {
        "label": "sim-a",
        "simulated": True,
        "host": True,
        "hosts": ["sim-a"],
        "online": True,
    }
    assert data["plan"]["gpu_labels"][0] == "rank 0 · sim-a:0"
    assert data["plan"]["launch"]["host"] == "sim-a"
    assert json.loads(json.dumps(data)) == data


def test_revision_is_pinned_once_in_every_command(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    sha = hub.repos[QWEN].refs["main"]
    status, data = plan(client, target="whatif", gpus="1x80GiB", revision=sha)
    assert status == 200 and data["ok"], data
    commands = data["plan"]["commands"]
    assert commands["vllm"].count("--revision") == 1 and f"--revision {sha}" in commands["vllm"]
    assert f"--revision {sha}" in commands["docker"] and sha in commands["kubernetes"]


def test_plan_with_room_for_replicas_says_launch_starts_one(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    _, data = plan(client, target="whatif", gpus="4x80GiB@nvlink", tensor_parallel_size="2")
    assert data["plan"]["replicas"] == 2
    assert data["plan"]["launch_note"] == (
        "Launch starts one replica on 2 GPUs; ask for a number of replicas to launch several "
        "as one deployment."
    )
    assert data["plan"]["launch"]["replicas"] == "1"
    _, data = plan(
        client, target="whatif", gpus="4x80GiB@nvlink", tensor_parallel_size="2", replicas="2"
    )
    assert data["plan"]["launch_note"] == "Launch starts 2 replicas, each its own engine on 2 GPUs."
    assert data["plan"]["launch"]["replicas"] == "2"
    assert data["plan"]["launch"]["placement"] == "spread"


def test_plan_panel_says_how_the_weights_are_stored(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    awq = "Qwen/Qwen2.5-7B-Instruct-AWQ"
    response = client.get("/models/plan/", {"ref": awq, "target": "whatif", "gpus": "1x80GiB"})
    assert response.status_code == 200
    assert response.json()["plan"]["format_notes"] == ["4-bit weights"]
    assert plan(client, target="whatif", gpus="1x80GiB")[1]["plan"]["format_notes"] == []
    page = client.get(f"/models/{awq}/").content.decode()
    assert re.search(r'id="plan-format-notes"[^>]*><li>4-bit weights</li>', page)
