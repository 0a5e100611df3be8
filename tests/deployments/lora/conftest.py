"""The LoRA tests' model root: the demo model and its adapters, in the settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.lora import model_root_with_adapters


@pytest.fixture
def root(tmp_path: Path, tiny_model: Path, settings: Any) -> Path:
    """A model root with the demo model and its adapters (tests.support.lora), as the only
    one in the settings (a server or worker forked after this sees it)."""
    base = model_root_with_adapters(tmp_path / "models", tiny_model)
    settings.MODEL_ROOTS = [base]
    return base
