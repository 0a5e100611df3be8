"""ASGI entry point: HTTP through Django, websockets through Channels (authenticated)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

from controlpanel.env import ConfigError

try:
    from django.core.asgi import get_asgi_application

    django_asgi_app = get_asgi_application()
except ConfigError as exc:
    sys.stderr.write(f"shardboard: configuration error: {exc}\n")
    raise SystemExit(2) from None

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator

from controlpanel.bodylimit import limit_bodies
from controlpanel.routing import websocket_urlpatterns
from playground.gateway.asgi import with_gateway

application = ProtocolTypeRouter(
    {
        # /v1/ (the OpenAI-compatible gateway) skips the synchronous middleware stack.
        # Bodies past the site's ceiling are refused before Django reads them (bodylimit).
        "http": with_gateway(limit_bodies(django_asgi_app)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
