"""Websocket routes of this app."""

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
