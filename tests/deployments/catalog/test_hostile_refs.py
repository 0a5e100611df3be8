"""Hostile model references and plan queries: a clear 400/404 naming what is wrong, never a 500
or a traceback. The Hub is the local stand-in; the plan queries are generated (hypothesis)."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deployments.catalog.sources import ModelSourceError, resolve_source
from tests.support.catalog import QWEN, login_client
from tests.support.hubstub import HubStub

TRACEBACK_MARKERS = ("Traceback", 'File "', "Error at /", "site-packages")


def no_traceback(body: bytes) -> None:
    text = body.decode(errors="replace")
    assert not any(marker in text for marker in TRACEBACK_MARKERS), text[:500]


@pytest.mark.parametrize(
    "path", ["/models/-x/y/", "/models/x/y-/", "/models/a..b/c/", "/models/a--b/c/"]
)
def test_bad_hub_id_in_the_path_is_a_400_page(
    client: Client, viewer: Any, hub: HubStub, path: str
) -> None:
    login_client(client, viewer)
    response = client.get(path)
    assert response.status_code == 400
    html = response.content.decode()
    assert "is not a Hub id" in html
    no_traceback(response.content)


@pytest.mark.parametrize("ref", ["a b/c", "-x/y", "x/y.git", "a/" + "b" * 100, "ä/b"])
def test_bad_hub_id_in_the_plan_query_is_a_400_json(
    client: Client, viewer: Any, hub: HubStub, ref: str
) -> None:
    login_client(client, viewer)
    response = client.get("/models/plan/", {"ref": ref})
    assert response.status_code == 400
    body = response.json()
    assert body["ok"] is False and body["plan"] is None
    assert "is not a Hub id" in body["error"] and repr(ref.strip()) in body["error"]


def test_resolve_source_refuses_what_huggingface_hub_would_raise_on() -> None:
    with pytest.raises(ModelSourceError, match="is not a Hub id"):
        resolve_source("a b/c")
    assert resolve_source(QWEN).engine_model == QWEN


# --- generated plan queries --------------------------------------------------------------------

VALID = {"ref": QWEN, "gpus": "4x80GiB@nvlink"}
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=string.printable, max_size=400),
    st.sampled_from(
        ["", " ", "-1", "0", "1e309", "NaN", "9" * 400, "--enforce-eager", "../../etc", "\x00"]
    ),
)
HOSTILE_NUMBER = st.one_of(st.integers(min_value=-(2**70), max_value=2**70).map(str), HOSTILE_TEXT)
FIELDS: dict[str, st.SearchStrategy[str]] = {
    "ref": HOSTILE_TEXT,
    "revision": HOSTILE_TEXT,
    "target": HOSTILE_TEXT,
    "gpus": HOSTILE_TEXT,
    "max_model_len": HOSTILE_NUMBER,
    "max_num_seqs": HOSTILE_NUMBER,
    "concurrency": HOSTILE_NUMBER,
    "goal": HOSTILE_TEXT,
    "dtype": HOSTILE_TEXT,
    "quantization": HOSTILE_TEXT,
    "kv_cache_dtype": HOSTILE_TEXT,
    "gpu_memory_utilization": HOSTILE_NUMBER,
    "tensor_parallel_size": HOSTILE_NUMBER,
    "pipeline_parallel_size": HOSTILE_NUMBER,
}
# What an error about each field says, besides the field's name: the value it refused.
MENTIONS = {"ref": ("model", "hub id"), "gpus": ("gpu",), "target": ("host",)}


def _names(field: str, value: str, error: str) -> bool:
    lowered = error.lower()
    words = (field, field.replace("_", " "), *MENTIONS.get(field, ()))
    return any(w in lowered for w in words) or (len(value.strip()) > 1 and value.strip() in error)


@settings(
    max_examples=60,
    deadline=2000,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(field=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_generated_plan_queries_answer_a_message_naming_the_field(
    client: Client, viewer: Any, hub: HubStub, field: str, data: st.DataObject
) -> None:
    value = data.draw(FIELDS[field], label=field)
    login_client(client, viewer)
    response = client.get("/models/plan/", {**VALID, field: value})
    assert response.status_code < 500, response.content[:300]
    no_traceback(response.content)
    body = json.loads(response.content)
    if response.status_code in (200, 422):  # planned: a layout fits, or the reasons it does not
        return
    assert body["ok"] is False and body["error"], body
    assert _names(field, value, body["error"]), (field, value, body["error"])


def test_max_num_seqs_has_an_upper_bound(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    response = client.get("/models/plan/", {**VALID, "max_num_seqs": "5000"})
    assert response.status_code == 400
    assert response.json()["error"] == (
        "max num seqs: Ensure this value is less than or equal to 4096."
    )
    assert client.get("/models/plan/", {**VALID, "max_num_seqs": "4096"}).status_code == 200


@pytest.mark.parametrize("revision", ["0\r0", "a b", "-x", "a..b", "x@{1}", "x~1"])
def test_a_revision_that_is_no_git_ref_is_a_400(
    client: Client, viewer: Any, hub: HubStub, revision: str
) -> None:
    login_client(client, viewer)
    response = client.get("/models/plan/", {**VALID, "revision": revision})
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"Revision {revision!r} is not a branch, tag")
    page = client.get(f"/models/{QWEN}/", {"revision": revision})
    assert page.status_code == 400 and "is not a branch, tag or commit id" in page.content.decode()


def test_a_revision_in_another_script_is_looked_up(
    client: Client, viewer: Any, hub: HubStub
) -> None:
    login_client(client, viewer)
    response = client.get("/models/plan/", {**VALID, "revision": "Ā"})
    assert response.status_code == 404
    assert "has no revision 'Ā'" in response.json()["error"]
