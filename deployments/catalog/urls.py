"""Routes of the Models catalog; local and fixed routes come before the `<org>/<name>` one."""

from django.urls import path

from deployments.catalog import views as cv

urlpatterns = [
    path("models/", cv.models_index, name="models"),
    path("models/results/", cv.models_results, name="models_results"),
    path("models/token/", cv.hub_token, name="models_token"),
    path("models/plan/", cv.plan_api, name="models_plan"),
    path("models/local/<int:root>/", cv.local_model, name="model_local_root"),
    path("models/local/<int:root>/<path:path>/", cv.local_model, name="model_local"),
    path("models/<str:org>/<str:name>/", cv.hub_model, name="model_hub"),
]
