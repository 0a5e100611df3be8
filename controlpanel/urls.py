from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from controlpanel import views
from controlpanel.api.main import api
from controlpanel.api.main import urlpatterns as api_urlpatterns
from controlpanel.login_throttle import ThrottledAuthenticationForm

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("audit/", views.audit_list, name="audit"),
    path("audit/export.<str:fmt>", views.audit_export, name="audit_export"),
    # Pages that do not extend base.html (the admin's) still get the icon browsers ask for.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    ),
    path("hosts/<str:name>/retire/", views.host_retire_view, name="host_retire"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_urlpatterns(), "ninja"), namespace=api.urls_namespace)),
    path("", include("monitoring.urls")),
    path("", include("deployments.catalog.urls")),
    path("", include("deployments.lifecycle.urls")),
    path("", include("deployments.autoscale.urls")),
    path("", include("playground.urls")),
    path("", include("benchmarks.urls")),
    path("", include("teams.urls")),
]

# A database that does not answer is a 503 that says so (controlpanel.dbdown).
handler500 = "controlpanel.dbdown.server_error"
