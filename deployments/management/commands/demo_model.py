"""Generate the tiny demo model into the first model root, so a GPU-less machine can serve it,
with a LoRA adapter of it to load onto a running deployment."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from deployments.catalog.demo_model import DEMO_ADAPTER, DEMO_GGUF, DEMO_MODEL_DIR


class Command(BaseCommand):
    help = "Create the tiny random-weight demo model under MODEL_ROOTS[0] (once)."

    def handle(self, *args: Any, **options: Any) -> None:
        from deployments.catalog.demo_model import is_complete, make_tiny_llama

        path = settings.MODEL_ROOTS[0] / DEMO_MODEL_DIR
        if not is_complete(path):
            try:
                make_tiny_llama(path)
            except ImportError as exc:
                self.stderr.write(
                    f"Skipping the demo model: the engine-cpu extra is missing ({exc})."
                )
                return
            self.stdout.write(f"Generated the demo model at {path}")
        gguf = settings.MODEL_ROOTS[0] / DEMO_GGUF
        if not gguf.is_file():
            from deployments.catalog.gguf_write import convert_demo

            convert_demo(path, gguf)
            self.stdout.write(f"Wrote the demo model as GGUF at {gguf}")
        adapter = settings.MODEL_ROOTS[0] / DEMO_ADAPTER
        if not (adapter / "adapter_model.safetensors").is_file():
            from deployments.catalog.demo_adapter import make_demo_adapter

            make_demo_adapter(adapter, base_model=DEMO_MODEL_DIR)
            self.stdout.write(f"Wrote a LoRA adapter of the demo model at {adapter}")
