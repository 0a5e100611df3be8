"""Which replica a prompt prefers, and the choice that weighs that preference against load.

Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018): a request
goes to the first replica of its prefix's preference order whose load, with this request, stays
within ``ceil(c × (total + 1) / m)`` (total: requests in flight on the m replicas in rotation).
The order is rendezvous hashing (highest random weight) of the prefix over the replicas' ids: a
replica that joins or leaves moves only the prefixes it wins or held, as on a hash ring, without
a ring to keep. Requests sharing a prefix then meet the engine whose prefix cache holds it,
while no replica takes more than c times the average, so a hot prefix spills over instead of
queueing on one engine (pure affinity's failure). A request without a prompt prefix goes to the
least loaded replica, as before.

Pure: no Redis, no Django. playground.gateway.balance runs the same rule inside one Redis
script (``choose`` here is its mirror: the fallback when Redis is down, the bench, the tests).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# How much of the prompt names its prefix. vLLM caches by 16-token blocks; a shared system
# prompt or few-shot header of a few hundred tokens is what repeats across requests, and the
# first 1 KiB of text (~250 tokens) is in it while the user's own question usually is not.
PREFIX_CHARS = 1024
# c of the load bound: 1.25 keeps every replica within 25 % over the mean (Vimeo's choice in
# HAProxy's `hash-balance-factor 125`); lower trades affinity for balance.
LOAD_FACTOR = 1.25


@dataclass(frozen=True, slots=True)
class Choice:
    index: int  # into the candidates
    home: bool  # it is the prefix's first choice in rotation (an affinity hit)


def prefix_key(body: Mapping[str, Any]) -> str:
    """The routing key of a request's prompt: a digest of its first PREFIX_CHARS characters
    (chat: the messages in order, roles included); empty when it has no text prompt."""
    text = _prompt_text(body)[:PREFIX_CHARS]
    if not text:
        return ""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _prompt_text(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) and isinstance(body.get("input"), list):
        messages = body["input"]  # Responses' input items: messages too ({role, content})
    if isinstance(messages, list):
        parts = []
        for m in messages:
            if isinstance(m, dict):
                content = m.get("content")
                flat = content if isinstance(content, str) else json.dumps(content)
                parts.append(f"{m.get('role', '')}:{flat}\n")
        return "".join(parts)
    prompt = body.get("prompt")
    if not isinstance(prompt, str | list):
        prompt = body.get("input")  # Responses' (and embeddings') text input
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    return ""


def preference(key: str, replica_ids: Sequence[int]) -> list[int]:
    """The candidates' indices in `key`'s rendezvous order (highest weight first)."""

    def weight(i: int) -> bytes:
        seed = f"{key}:{replica_ids[i]}".encode()
        return hashlib.blake2b(seed, digest_size=8).digest()

    return sorted(range(len(replica_ids)), key=weight, reverse=True)


def load_bound(total: int, in_rotation: int, factor: float) -> int:
    """The most requests one replica may hold, this one included."""
    return max(1, math.ceil(factor * (total + 1) / in_rotation))


def choose(
    counts: Sequence[int | None],
    order: Sequence[int] | None,
    *,
    factor: float = LOAD_FACTOR,
    offset: int = 0,
) -> Choice | None:
    """The replica for one request. `counts`: in flight per candidate (None: out of rotation,
    down or draining); `order`: the prefix's preference (None: no prefix, least loaded);
    `offset` rotates ties among the least loaded. None when every candidate is out."""
    live = [c for c in counts if c is not None]
    if not live:
        return None
    if order is not None:
        bound = load_bound(sum(live), len(live), factor)
        home = next(i for i in order if counts[i] is not None)
        for i in order:
            c = counts[i]
            if c is not None and c + 1 <= bound:
                return Choice(i, i == home)
    n = len(counts)
    best, best_count = -1, -1
    for k in range(n):
        i = (k + offset) % n
        c = counts[i]
        if c is not None and (best_count < 0 or c < best_count):
            best, best_count = i, c
    return Choice(best, False)
