"""All websocket routes, gathered from the apps."""

from django.urls import path

from benchmarks.routing import websocket_urlpatterns as benchmark_routes
from controlpanel import consumers
from deployments.lifecycle.routing import websocket_urlpatterns as deployment_routes
from monitoring.routing import websocket_urlpatterns as monitoring_routes

websocket_urlpatterns = [
    path("ws/events/", consumers.EventsConsumer.as_asgi()),
    *monitoring_routes,
    *deployment_routes,
    *benchmark_routes,
]
