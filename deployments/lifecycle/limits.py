"""What a launch may ask for: the deployment name's shape and the bounds of the plan overrides.

The name becomes an engine argument (`--served-model-name`), a model name in /v1/ and part of
URLs and log lines: a name that starts with a dash would be read as a flag.
"""

from __future__ import annotations

import re

NAME_MAX_CHARS = 63
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]*")
NAME_RULE = (
    f"use 1 to {NAME_MAX_CHARS} lowercase letters, digits and dashes, starting with a letter "
    "or a digit"
)
# vLLM's own default is 256 (1024 in throughput mode); each sequence slot costs memory for
# CUDA graphs and sampling, and a number past this is a typo, not a plan.
MAX_NUM_SEQS = 4096


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a deployment, or None when it can."""
    if len(name) > NAME_MAX_CHARS or not NAME_PATTERN.fullmatch(name):
        return f"Name {name!r} is refused: {NAME_RULE}."
    return None
