"""Routes of the Models catalog; local and fixed routes come before the `<org>/<name>` one."""

from django.urls import path

from deployments.catalog import cache_views
from deployments.catalog import gguf_views as gv
from deployments.catalog import views as cv

urlpatterns = [
    path("models/", cv.models_index, name="models"),
    path("models/results/", cv.models_results, name="models_results"),
    path("models/token/", cv.hub_token, name="models_token"),
    path("models/plan/", cv.plan_api, name="models_plan"),
    path("models/on-hosts/", cache_views.models_on_hosts, name="models_on_hosts"),
    path("models/on-hosts/prefetch/", cache_views.prefetch, name="models_prefetch"),
    path(
        "models/on-hosts/downloads/<int:pk>/cancel/",
        cache_views.download_cancel,
        name="models_download_cancel",
    ),
    path(
        "models/on-hosts/<int:pk>/delete/", cache_views.cached_delete, name="models_cached_delete"
    ),
    path("models/plan/gguf/", gv.gguf_plan_api, name="models_plan_gguf"),
    path("models/gguf/local/<int:root>/<path:path>/", gv.gguf_local_model, name="model_gguf_local"),
    path("models/gguf/<str:org>/<str:name>/", gv.gguf_hub_model, name="model_gguf_hub"),
    path("models/local/<int:root>/", cv.local_model, name="model_local_root"),
    path("models/local/<int:root>/<path:path>/", cv.local_model, name="model_local"),
    path("models/<str:org>/<str:name>/", cv.hub_model, name="model_hub"),
]
