"""The Anthropic SDK and the OpenAI SDK through the gateway against a real llama-server, which
serves /v1/messages, /v1/messages/count_tokens, /v1/responses and, started with --embeddings,
/v1/embeddings (llama.cpp b11434: tools/server/server.cpp:276-298)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlpanel.models import AuditEvent
from playground import services
from tests.support.llama_server import llama_server, server_binary
from tests.support.waiting import wait_for

pytestmark = pytest.mark.engine

USER = [{"role": "user", "content": "1 + 1 ="}]


@pytest.fixture
def llama(make_deployment: Any, tmp_path: Path) -> Iterator[Any]:
    """A llamacpp deployment row and its real engine, holding the row's key and name."""
    binary = server_binary()
    if binary is None:
        pytest.skip("no llama-server binary: run scripts/llama.sh")
    from deployments.catalog.gguf_write import write_random_llama
    from tests.support.llama_shapes import TINY

    model = write_random_llama(tmp_path / "tiny.gguf", TINY, quant="F32")
    deployment = make_deployment("llama", 1, engine="llamacpp")
    args = [
        "--api-key",
        deployment.engine_api_key(),
        "-a",
        "llama",
        "-c",
        "512",
        "--embeddings",
        "--pooling",
        "mean",
    ]
    with llama_server(binary, model, args, tmp_path) as started:
        deployment.port = int(started.url.rsplit(":", 1)[1])
        deployment.save(update_fields=["port"])
        yield deployment


def test_anthropic_and_openai_sdks_through_the_gateway_to_llama_server(
    server: Any, llama: Any, operator: Any
) -> None:
    from anthropic import Anthropic
    from openai import OpenAI

    raw = services.token_create(user=operator, name="sdk")[1]
    claude = Anthropic(base_url=server.url, api_key=raw, max_retries=0)
    message = claude.messages.create(model="llama", max_tokens=4, messages=USER)
    assert message.usage.input_tokens >= 1 and 1 <= message.usage.output_tokens <= 4
    # Raw events, not messages.stream(): this llama-server now and then starts a stream without
    # its message_start (seen talking to it directly too, on the random-weight model), which
    # the SDK's accumulator cannot do without.
    events = list(claude.messages.create(model="llama", max_tokens=3, messages=USER, stream=True))
    assert events[-1].type == "message_stop"
    ends = [e for e in events if e.type == "message_delta"]
    assert len(ends) == 1 and 1 <= ends[0].usage.output_tokens <= 3
    assert claude.messages.count_tokens(model="llama", messages=USER).input_tokens >= 1
    openai = OpenAI(base_url=f"{server.url}/v1", api_key=raw, max_retries=0)
    response = openai.responses.create(model="llama", input="1 + 1 =", max_output_tokens=3)
    assert response.usage is not None and response.usage.output_tokens >= 1
    embedded = openai.embeddings.create(model="llama", input="hello", encoding_format="float")
    assert len(embedded.data[0].embedding) > 0 and embedded.usage.prompt_tokens >= 1

    rows = AuditEvent.objects.filter(action="playground.request", detail__status="ok")
    wait_for(lambda: rows.count() == 5)
    usage = {(r.detail["endpoint"], r.detail["stream"]): r.detail["usage"] for r in rows}
    assert usage["/v1/messages", False]["prompt"] >= 1
    assert usage["/v1/messages", False]["completion"] >= 1
    assert usage["/v1/messages", True]["completion"] >= 1  # message_delta's output_tokens
    assert usage["/v1/responses", False]["completion"] >= 1
    assert usage["/v1/embeddings", False]["prompt"] >= 1
