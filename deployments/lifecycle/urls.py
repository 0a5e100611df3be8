from django.urls import path

from deployments.lifecycle import accuracy_views, adapter_views, engine_views, idle_views
from deployments.lifecycle import views as dv

urlpatterns = [
    path("deployments/", dv.deployment_list, name="deployments"),
    path("deployments/new/", dv.deployment_new, name="deployment_new"),
    path("deployments/<int:pk>/", dv.deployment_detail, name="deployment_detail"),
    path("deployments/<int:pk>/log/", dv.deployment_log, name="deployment_log"),
    path("deployments/<int:pk>/memory/", dv.deployment_memory, name="deployment_memory"),
    path("deployments/<int:pk>/stop/", dv.deployment_stop, name="deployment_stop"),
    path("deployments/<int:pk>/scale/", dv.deployment_scale, name="deployment_scale"),
    path("deployments/<int:pk>/relaunch/", dv.deployment_relaunch, name="deployment_relaunch"),
    path("deployments/<int:pk>/idle/", idle_views.deployment_idle, name="deployment_idle"),
    path("engines/state/", engine_views.engines_state, name="engines_state"),
    path("engines/<str:host>/<str:engine>/retry/", engine_views.engine_retry, name="engine_retry"),
    path(
        "deployments/<int:pk>/adapters/",
        adapter_views.adapter_load,
        name="deployment_adapter_load",
    ),
    path(
        "deployments/<int:pk>/adapters/<slug:name>/unload/",
        adapter_views.adapter_unload,
        name="deployment_adapter_unload",
    ),
    path("planner-accuracy/", accuracy_views.planner_accuracy, name="planner_accuracy"),
]
