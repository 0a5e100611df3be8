"""`manage.py export_planner_cases [--engine vllm] [--output cases.tsv]`: every recorded engine
start as a planner case (``lifecycle.planner_cases``), oldest first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from deployments.lifecycle.planner_cases import case_lines
from deployments.models import Engine, StartObservation


class Command(BaseCommand):
    help = "Write the fleet's engine starts in the TSV format of planner-cases/cases.tsv."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--engine", choices=Engine.values, help="only this engine's starts")
        parser.add_argument("--output", type=Path, help="a file (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = StartObservation.objects.order_by("recorded_at", "id")
        if options["engine"]:
            rows = rows.filter(engine=options["engine"])
        text = "".join(f"{line}\n" for line in case_lines(rows))
        if options["output"]:
            options["output"].write_text(text, encoding="utf-8")
            self.stderr.write(f"{rows.count()} cases written to {options['output']}")
        else:
            self.stdout.write(text, ending="")
