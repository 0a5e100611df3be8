from django.urls import path

from monitoring import views

urlpatterns = [
    path("gpus/topology/", views.topology, name="gpu-topology"),
    path("metrics", views.metrics, name="metrics"),
]
