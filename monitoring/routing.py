"""Websocket routes of this app."""

from django.urls import path

from monitoring.consumers import GpuConsumer

websocket_urlpatterns = [path("ws/gpus/", GpuConsumer.as_asgi())]
