from django.urls import path

from playground import views

urlpatterns = [
    path("playground/", views.playground_index, name="playground"),
]
