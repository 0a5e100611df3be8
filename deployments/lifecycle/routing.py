"""Websocket routes of the deployments app."""

from django.urls import path

from deployments.lifecycle import consumers

websocket_urlpatterns = [
    path("ws/deployments/", consumers.DeploymentsConsumer.as_asgi()),
    path("ws/engines/", consumers.EnginesConsumer.as_asgi()),
    path("ws/deployments/<int:pk>/log/", consumers.EngineLogConsumer.as_asgi()),
]
