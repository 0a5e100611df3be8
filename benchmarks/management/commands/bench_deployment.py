"""Benchmark a running deployment from the command line: the same run as the page's, started
as a user (operator role, audited), executed by the deployment's host worker."""

from __future__ import annotations

import json
import time
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks import selectors
from benchmarks.models import BenchmarkRun
from benchmarks.services import BenchmarkError, run_start
from deployments.models import Deployment, Status


class Command(BaseCommand):
    help = "Start a benchmark of a running deployment on its host worker; --wait for the figures."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("deployment", help="the running deployment's name or id")
        parser.add_argument("--user", required=True, help="who starts it (operator role)")
        parser.add_argument(
            "--levels", default="1,4,16", help="concurrencies (or rates), e.g. 1,4,16"
        )
        parser.add_argument("--rate", action="store_true", help="levels are request rates (req/s)")
        parser.add_argument("--max-concurrency", type=int, help="--rate: most requests in flight")
        amount = parser.add_mutually_exclusive_group()
        amount.add_argument("--requests", type=int, help="requests per level (default 32)")
        amount.add_argument("--duration", type=float, help="seconds per level")
        parser.add_argument("--prompt", type=int, default=128, help="prompt length in words")
        parser.add_argument("--prompt-kind", default="fixed", help="fixed, uniform or normal")
        parser.add_argument("--prompt-spread", type=int, default=0)
        parser.add_argument("--output", type=int, default=64, help="output length in tokens")
        parser.add_argument("--output-kind", default="fixed")
        parser.add_argument("--output-spread", type=int, default=0)
        parser.add_argument("--prompts-file", help="one prompt a line (UTF-8)")
        parser.add_argument("--sla-ttft-p95-ms", type=float)
        parser.add_argument("--sla-itl-p95-ms", type=float)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--label", default="")
        parser.add_argument("--wait", action="store_true", help="wait for the end, print figures")
        parser.add_argument("--json", action="store_true", help="with --wait: the JSON export")
        parser.add_argument("--timeout", type=float, default=3600, help="with --wait, seconds")

    def handle(self, *args: Any, **o: Any) -> None:
        user = get_user_model().objects.filter(username=o["user"]).first()
        if user is None:
            raise CommandError(f"No user {o['user']!r}.")
        try:
            run = run_start(
                user=user,
                deployment=_deployment(o["deployment"]),
                workload=_workload(o),
                label=o["label"],
            )
        except BenchmarkError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"benchmark {run.pk} started on {run.layout['host']}")
        if o["wait"]:
            run = self._wait(run, o["timeout"])
            if o["json"]:
                self.stdout.write(json.dumps(selectors.export(run), indent=2))
            else:
                self._table(run)
            if run.status != "succeeded":
                raise CommandError(f"benchmark {run.pk} {run.status}: {run.error}")

    def _wait(self, run: BenchmarkRun, timeout_s: float) -> BenchmarkRun:
        deadline = time.monotonic() + timeout_s
        while not run.ended:
            if time.monotonic() > deadline:
                raise CommandError(f"benchmark {run.pk} still {run.status} after {timeout_s:g} s")
            time.sleep(1)
            run.refresh_from_db()
        return run

    def _table(self, run: BenchmarkRun) -> None:
        self.stdout.write(f"{'load':>5} {'ok':>6} {'fail':>5} {'req/s':>8} {'tok/s':>9} "
                          f"{'TTFT p50/p99 ms':>17} {'ITL p50/p99 ms':>16}  bottleneck")  # fmt: skip
        for lv in sorted(run.levels, key=lambda lv: lv["load"]):
            ttft, itl = lv["ttft_ms"] or {}, lv["itl_ms"] or {}
            self.stdout.write(
                f"{lv['load']:>5g} {lv['completed']:>6} {lv['failed']:>5} "
                f"{lv['request_throughput']:>8.2f} {lv['output_throughput']:>9.1f} "
                f"{_pair(ttft):>17} {_pair(itl):>16}  {(lv.get('reading') or {}).get('title', '')}"
            )


def _pair(figures: dict[str, float]) -> str:
    return f"{figures['p50']:.1f}/{figures['p99']:.1f}" if figures else "-"


def _deployment(ref: str) -> Deployment:
    rows = Deployment.objects.filter(status=Status.RUNNING)
    found = rows.filter(pk=int(ref)).first() if ref.isdigit() else rows.filter(name=ref).first()
    if found is None:
        raise CommandError(f"No running deployment {ref!r}.")
    return found


def _workload(o: dict[str, Any]) -> dict[str, Any]:
    prompts = ""
    if o["prompts_file"]:
        try:
            with open(o["prompts_file"], encoding="utf-8") as handle:
                prompts = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Prompts file: {exc}") from None
    return {
        "prompt": {"mean": o["prompt"], "kind": o["prompt_kind"], "spread": o["prompt_spread"]},
        "output": {"mean": o["output"], "kind": o["output_kind"], "spread": o["output_spread"]},
        "levels": o["levels"],
        "requests_per_level": (o["requests"] or 32) if o["duration"] is None else None,
        "duration_s": o["duration"],
        "seed": o["seed"],
        "sla_ttft_p95_ms": o["sla_ttft_p95_ms"],
        "sla_itl_p95_ms": o["sla_itl_p95_ms"],
        "prompts": prompts,
        "mode": "rate" if o["rate"] else "concurrency",
        "max_concurrency": o["max_concurrency"],
    }
