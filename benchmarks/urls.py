from django.urls import path

from benchmarks import views

urlpatterns = [
    path(
        "deployments/<int:pk>/benchmarks/",
        views.deployment_benchmarks,
        name="deployment_benchmarks",
    ),
    path(
        "deployments/<int:pk>/benchmarks/section/",
        views.deployment_section,
        name="deployment_benchmark_section",
    ),
    path("benchmarks/compare/", views.benchmark_compare, name="benchmark_compare"),
    path("benchmarks/<int:pk>/", views.benchmark_detail, name="benchmark_detail"),
    path("benchmarks/<int:pk>/cancel/", views.benchmark_cancel, name="benchmark_cancel"),
    path("benchmarks/<int:pk>/export/", views.benchmark_export, name="benchmark_export"),
    path("benchmarks/<int:pk>/progress/", views.benchmark_progress, name="benchmark_progress"),
]
