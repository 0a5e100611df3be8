from django.urls import path

from playground import views
from playground.gateway import views as gateway_views

gateway_urlpatterns = [
    path("v1/chat/completions", gateway_views.chat_completions, name="gateway-chat"),
    path("v1/completions", gateway_views.completions, name="gateway-completions"),
    path("v1/models", gateway_views.models_list, name="gateway-models"),
]

urlpatterns = [
    path("playground/", views.playground_index, name="playground"),
    path("playground/runs.json", views.runs_json, name="playground-runs"),
    path(
        "playground/runs/<int:run_id>/browser/",
        views.run_browser_timings,
        name="playground-run-browser",
    ),
    path("playground/tokens/", views.token_create, name="playground-token-create"),
    path(
        "playground/tokens/<int:token_id>/revoke/",
        views.token_revoke,
        name="playground-token-revoke",
    ),
    *gateway_urlpatterns,
]
