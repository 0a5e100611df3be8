"""``python manage.py plan MODEL [--gpus SPEC] [--tp N] [--pp N] ... [--json]``."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

from deployments.catalog.plan_cli import PlanCliError, add_arguments, one_line, run_plan


class _OneLineParser(CommandParser):
    """Argument errors as one line and exit status 2, never a usage dump."""

    def error(self, message: str) -> NoReturn:
        if self.called_from_command_line:
            sys.stderr.write(f"plan: {one_line(message)}\n")
            sys.exit(2)
        raise CommandError(f"Error: {message}", returncode=2)


class Command(BaseCommand):
    help = "How a model would be split over GPUs by vLLM: per-GPU memory, KV cache, command."

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = _OneLineParser  # Django 5.2 has no parser_class hook
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self.stdout.write(run_plan(options))
        except PlanCliError as exc:
            raise CommandError(str(exc), returncode=2) from None
