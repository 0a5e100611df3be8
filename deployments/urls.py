from django.urls import path

from deployments import views

urlpatterns = [
    path("models/", views.models_index, name="models"),
    path("deployments/", views.deployments_index, name="deployments"),
]
