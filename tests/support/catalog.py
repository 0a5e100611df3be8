"""Names the Hub stand-in serves, the tokens it grants, and helpers of the catalog tests."""

from __future__ import annotations

from typing import Any

import redis
from django.conf import settings as django_settings

QWEN = "Qwen/Qwen2.5-7B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
BIG = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
TOKEN = "hf_catalog_user_token_5f2c9a1e"
GEMMA = "google/gemma-2-9b-it"
GRANTED = "hf_granted_token_1234567890"
UNGRANTED = "hf_ungranted_token_0987654321"
GIB = 1 << 30


def clear_hub_cache() -> None:
    """Hub entries in Redis outlive test databases and are not keyed by endpoint: drop them."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = list(client.scan_iter(match="*shardboard:hub:v1:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def login_client(client: Any, user: Any) -> Any:
    client.force_login(user)
    return client
