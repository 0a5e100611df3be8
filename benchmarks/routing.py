"""Websocket routes of the benchmarks app."""

from django.urls import path

from benchmarks import consumers

websocket_urlpatterns = [
    path("ws/benchmarks/<int:pk>/", consumers.BenchmarkConsumer.as_asgi()),
]
