from django.urls import path

from playground import views
from playground.gateway.urls import urlpatterns as gateway_urlpatterns

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
    path("tokens/", views.tokens_index, name="tokens"),
    path("tokens/<int:token_id>/revoke/", views.tokens_revoke, name="tokens-revoke"),
    path("tokens/<int:token_id>/limits/", views.tokens_limits, name="tokens-limits"),
    path("tokens/<int:token_id>/models/", views.tokens_models, name="tokens-models"),
    *gateway_urlpatterns,
]
