from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from deployments.catalog.demo_model import COMPLETE_MARKER, make_tiny_llama


def test_tiny_llama_files(tiny_model: Path) -> None:
    names = {p.name for p in tiny_model.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", COMPLETE_MARKER} <= names
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert (tiny_model / "model.safetensors").stat().st_size < 2_000_000


def test_tokenizer_and_chat_template(tiny_model: Path) -> None:
    tokenizer = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    ids = tokenizer.encode("1 + 1 =").ids
    assert ids and max(ids) < json.loads((tiny_model / "config.json").read_text())["vocab_size"]
    assert tokenizer.decode(ids) == "1 + 1 ="
    template_files = [*tiny_model.glob("chat_template*"), tiny_model / "tokenizer_config.json"]
    assert any("add_generation_prompt" in p.read_text() for p in template_files if p.exists())


def test_second_call_is_a_no_op(tiny_model: Path) -> None:
    before = (tiny_model / "model.safetensors").stat().st_mtime_ns
    assert make_tiny_llama(tiny_model) == tiny_model
    assert (tiny_model / "model.safetensors").stat().st_mtime_ns == before


def test_refuses_to_overwrite_a_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        make_tiny_llama(tmp_path)
