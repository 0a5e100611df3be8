from django.urls import path

from deployments.autoscale import views

urlpatterns = [
    path("deployments/<int:pk>/autoscale/", views.section, name="deployment_autoscale"),
    path("deployments/<int:pk>/autoscale/chart/", views.chart, name="deployment_autoscale_chart"),
    path(
        "deployments/<int:pk>/autoscale/policy/", views.policy, name="deployment_autoscale_policy"
    ),
]
