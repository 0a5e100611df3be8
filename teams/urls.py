from __future__ import annotations

from django.urls import path

from teams import views

urlpatterns = [path("usage/", views.usage_page, name="usage")]
