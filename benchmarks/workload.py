"""What a benchmark run sends: lengths, concurrency levels, how long each level lasts, the SLA.

Pure (no Django, no I/O): validated from a dict (a form, the API, the command line) into frozen
dataclasses, and back to a dict for the run's row. The synthetic prompts are words drawn with a
seeded generator, so two runs of one workload send the same prompts.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

DISTRIBUTIONS = ("fixed", "uniform", "normal")
MODES = ("concurrency", "rate")  # closed loop of N clients, or Poisson arrivals at N req/s
MAX_RATE = 10_000.0
MAX_LEVELS = 12
MAX_CONCURRENCY = 1024
MAX_REQUESTS = 100_000
MAX_DURATION_S = 3600.0
MAX_PROMPT_WORDS = 131_072
MAX_OUTPUT_TOKENS = 32_768
MAX_UPLOADED_PROMPTS = 5_000
MAX_UPLOADED_CHARS = 2_000_000

# Common English words: one word is about one token in the usual BPE vocabularies, which is
# how the prompt length (in words) maps onto the prompt tokens the engine then reports.
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their has been if more when will would "
    "who so no time about many then them these some what other into only new could could very "
    "after first also made may water day long down over such through where most people way "
    "year work place right good small large great old world house number city system state "
    "light river mountain garden music window table morning evening question answer story"
).split()


class WorkloadError(ValueError):
    """The workload cannot run; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length per request: fixed, uniform in mean ± spread, or normal(mean, spread)."""

    mean: int
    kind: str = "fixed"
    spread: int = 0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "uniform":
            value = rng.randint(self.mean - self.spread, self.mean + self.spread)
        elif self.kind == "normal":
            value = round(rng.gauss(self.mean, self.spread))
        else:
            value = self.mean
        return max(1, value)

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "kind": self.kind, "spread": self.spread}


@dataclass(frozen=True, slots=True)
class Workload:
    prompt: Lengths
    output: Lengths
    levels: tuple[float, ...]  # concurrencies (whole numbers) or request rates (req/s)
    requests_per_level: int | None = None
    duration_s: float | None = None
    seed: int = 0
    sla_ttft_p95_ms: float | None = None
    sla_itl_p95_ms: float | None = None
    prompts: tuple[str, ...] = field(default=(), repr=False)  # uploaded; synthetic when empty
    mode: str = "concurrency"
    max_concurrency: int | None = None  # rate mode: at most this many requests in flight

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt": self.prompt.to_dict(),
            "output": self.output.to_dict(),
            "levels": list(self.levels),
            "requests_per_level": self.requests_per_level,
            "duration_s": self.duration_s,
            "seed": self.seed,
            "sla_ttft_p95_ms": self.sla_ttft_p95_ms,
            "sla_itl_p95_ms": self.sla_itl_p95_ms,
            "prompts": list(self.prompts),
            "mode": self.mode,
            "max_concurrency": self.max_concurrency,
        }

    @property
    def has_sla(self) -> bool:
        return self.sla_ttft_p95_ms is not None or self.sla_itl_p95_ms is not None

    def describe(self) -> str:
        per = (
            f"{self.requests_per_level} requests"
            if self.requests_per_level
            else f"{self.duration_s:g} s"
        )
        source = f"{len(self.prompts)} uploaded prompts" if self.prompts else "synthetic prompts"
        values = ", ".join(f"{v:g}" for v in self.levels)
        load = f"concurrency {values}"
        if self.mode == "rate":
            cap = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
            load = f"request rate {values} req/s (Poisson arrivals{cap})"
        return (
            f"prompt {_length_text(self.prompt, 'words')}, output "
            f"{_length_text(self.output, 'tokens')}, {load}, {per} a level, {source}"
        )


def _length_text(lengths: Lengths, unit: str) -> str:
    if lengths.kind == "fixed":
        return f"{lengths.mean} {unit}"
    sign = "±" if lengths.kind == "uniform" else "sd"
    return f"{lengths.mean} {sign} {lengths.spread} {unit} ({lengths.kind})"


def parse_levels(
    text: str | list[Any] | tuple[Any, ...], mode: str = "concurrency"
) -> tuple[float, ...]:
    """ "1,2,4" or [1, 2, 4] → (1, 2, 4): distinct, ascending; concurrencies are whole numbers
    1..MAX_CONCURRENCY, request rates numbers above 0 up to MAX_RATE req/s."""
    items = text.replace(" ", "").split(",") if isinstance(text, str) else list(text)
    kind = int if mode == "concurrency" else float
    try:
        levels = sorted({kind(item) for item in items if str(item) != ""})
    except (TypeError, ValueError):
        example = "1,4,16" if kind is int else "0.5,2,8"
        raise WorkloadError(
            f"Levels: {'whole ' if kind is int else ''}numbers separated by commas, such as "
            f"{example} (got {text!r})."
        ) from None
    if not levels:
        raise WorkloadError("Levels: give at least one, such as 1,4,16.")
    high = MAX_CONCURRENCY if kind is int else MAX_RATE
    if (
        len(levels) > MAX_LEVELS
        or not levels[0] > 0
        or levels[-1] > high
        or levels[-1] != levels[-1]
    ):
        raise WorkloadError(
            f"Levels: at most {MAX_LEVELS} levels, each above 0 and at most {high:g}"
            f"{'' if kind is int else ' req/s'}."
        )
    return tuple(levels)


def parse_workload(data: Mapping[str, Any]) -> Workload:
    """A Workload from a plain dict (the row, the API, the command line), or WorkloadError."""
    requests = _optional_number(data, "requests_per_level", int, 1, MAX_REQUESTS)
    duration = _optional_number(data, "duration_s", float, 1.0, MAX_DURATION_S)
    if (requests is None) == (duration is None):
        raise WorkloadError("Give either a number of requests per level or a duration per level.")
    mode = str(data.get("mode") or "concurrency")
    if mode not in MODES:
        raise WorkloadError(f"Mode: one of {', '.join(MODES)}.")
    return Workload(
        prompt=_lengths(data.get("prompt"), "Prompt length", MAX_PROMPT_WORDS),
        output=_lengths(data.get("output"), "Output length", MAX_OUTPUT_TOKENS),
        levels=parse_levels(data.get("levels", ""), mode),
        requests_per_level=requests,
        duration_s=duration,
        seed=_optional_number(data, "seed", int, 0, 2**31) or 0,
        sla_ttft_p95_ms=_optional_number(data, "sla_ttft_p95_ms", float, 0.001, 3_600_000),
        sla_itl_p95_ms=_optional_number(data, "sla_itl_p95_ms", float, 0.001, 3_600_000),
        prompts=parse_prompts(data.get("prompts") or ()),
        mode=mode,
        max_concurrency=(
            _optional_number(data, "max_concurrency", int, 1, MAX_CONCURRENCY)
            if mode == "rate"
            else None
        ),
    )


def parse_prompts(raw: str | list[Any] | tuple[Any, ...]) -> tuple[str, ...]:
    """Uploaded prompts: a text with one prompt a line, or a list of strings."""
    items = raw.splitlines() if isinstance(raw, str) else list(raw)
    prompts = tuple(str(p).strip() for p in items if str(p).strip())
    if len(prompts) > MAX_UPLOADED_PROMPTS or sum(map(len, prompts)) > MAX_UPLOADED_CHARS:
        raise WorkloadError(
            f"Prompts file: at most {MAX_UPLOADED_PROMPTS} prompts and "
            f"{MAX_UPLOADED_CHARS:,} characters in all."
        )
    return prompts


def _lengths(raw: Any, label: str, high: int) -> Lengths:
    if isinstance(raw, int | str):
        raw = {"mean": raw}
    if not isinstance(raw, Mapping):
        raise WorkloadError(f"{label}: give a number, such as 128.")
    kind = str(raw.get("kind") or "fixed")
    if kind not in DISTRIBUTIONS:
        raise WorkloadError(f"{label}: the distribution is one of {', '.join(DISTRIBUTIONS)}.")
    mean = _number(raw.get("mean"), f"{label}", int, 1, high)
    spread = (
        0 if kind == "fixed" else _number(raw.get("spread", 0), f"{label} spread", int, 0, high)
    )
    if kind == "uniform" and spread >= mean:
        raise WorkloadError(f"{label}: the spread of a uniform length must be below its mean.")
    return Lengths(mean=mean, kind=kind, spread=spread)


def _optional_number(
    data: Mapping[str, Any], key: str, kind: type[int] | type[float], low: float, high: float
) -> Any:
    value = data.get(key)
    if value is None or value == "":
        return None
    return _number(value, key.replace("_", " ").capitalize(), kind, low, high)


def _number(value: Any, label: str, kind: type[int] | type[float], low: float, high: float) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise WorkloadError(f"{label}: {value!r} is not a number.") from None
    if not low <= number <= high or number != number:
        raise WorkloadError(f"{label}: between {low:g} and {high:g} (got {value!r}).")
    return number


# --- the requests a level sends -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptSpec:
    text: str
    max_tokens: int


def synthetic_prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def request_stream(workload: Workload, level_index: int) -> Iterator[PromptSpec]:
    """The level's requests, endless and deterministic: seeded by the run's seed and the level."""
    rng = random.Random(workload.seed * 1_000_003 + level_index)  # noqa: S311  (not for secrets)
    n = 0
    while True:
        if workload.prompts:
            text = workload.prompts[n % len(workload.prompts)]
        else:
            text = synthetic_prompt(rng, workload.prompt.draw(rng))
        yield PromptSpec(text=text, max_tokens=workload.output.draw(rng))
        n += 1
