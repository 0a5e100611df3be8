"""The form that starts a run: its fields map onto workload.parse_workload's dict."""

from __future__ import annotations

from typing import Any

from django import forms

from benchmarks.workload import DISTRIBUTIONS, MAX_UPLOADED_CHARS, WorkloadError, parse_workload

KINDS = [(k, k) for k in DISTRIBUTIONS]
PER_LEVEL = [("requests", "requests per level"), ("duration", "seconds per level")]
MODE_CHOICES = [("concurrency", "concurrency (closed loop)"), ("rate", "request rate (Poisson)")]


class BenchmarkForm(forms.Form):
    label = forms.CharField(max_length=100, required=False)
    prompt_mean = forms.IntegerField(initial=128, min_value=1, label="Prompt length (words)")
    prompt_kind = forms.ChoiceField(choices=KINDS, initial="fixed")
    prompt_spread = forms.IntegerField(initial=0, min_value=0, required=False)
    output_mean = forms.IntegerField(initial=64, min_value=1, label="Output length (tokens)")
    output_kind = forms.ChoiceField(choices=KINDS, initial="fixed")
    output_spread = forms.IntegerField(initial=0, min_value=0, required=False)
    mode = forms.ChoiceField(
        choices=MODE_CHOICES, initial="concurrency", required=False, label="Levels are"
    )
    levels = forms.CharField(initial="1,4,16", label="Levels (concurrencies or req/s)")
    max_concurrency = forms.IntegerField(
        required=False, min_value=1, label="Rate: most in flight (optional)"
    )
    per_level = forms.ChoiceField(choices=PER_LEVEL, initial="requests")
    amount = forms.FloatField(initial=32, min_value=1, label="Requests or seconds per level")
    seed = forms.IntegerField(initial=0, min_value=0, required=False)
    sla_ttft_p95_ms = forms.FloatField(required=False, min_value=0.001, label="SLA: TTFT p95 (ms)")
    sla_itl_p95_ms = forms.FloatField(required=False, min_value=0.001, label="SLA: ITL p95 (ms)")
    prompts_file = forms.FileField(
        required=False, label="Prompts file (optional: one prompt a line, UTF-8)"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["workload"] = parse_workload(self.workload_dict(data))
        except WorkloadError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data

    def workload_dict(self, data: dict[str, Any]) -> dict[str, Any]:
        amount = data["amount"]
        by_requests = data["per_level"] == "requests"
        return {
            "prompt": {
                "mean": data["prompt_mean"],
                "kind": data["prompt_kind"],
                "spread": data.get("prompt_spread") or 0,
            },
            "output": {
                "mean": data["output_mean"],
                "kind": data["output_kind"],
                "spread": data.get("output_spread") or 0,
            },
            "levels": data["levels"],
            "mode": data.get("mode") or "concurrency",
            "max_concurrency": data.get("max_concurrency"),
            "requests_per_level": int(amount) if by_requests else None,
            "duration_s": None if by_requests else amount,
            "seed": data.get("seed") or 0,
            "sla_ttft_p95_ms": data.get("sla_ttft_p95_ms"),
            "sla_itl_p95_ms": data.get("sla_itl_p95_ms"),
            "prompts": _read_prompts(data.get("prompts_file")),
        }


def _read_prompts(upload: Any) -> str:
    if not upload:
        return ""
    if upload.size > MAX_UPLOADED_CHARS * 2:
        raise WorkloadError("Prompts file: too large (at most about 2 MB).")
    try:
        return str(upload.read().decode("utf-8"))
    except UnicodeDecodeError:
        raise WorkloadError("Prompts file: not UTF-8 text.") from None
