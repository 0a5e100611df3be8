import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_anonymous_is_sent_to_login(client: Client) -> None:
    for path in ["/", "/deployments/", "/models/", "/playground/", "/audit/"]:
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"].startswith("/accounts/login/")


def test_user_without_role_is_refused(client: Client, outsider) -> None:
    client.force_login(outsider)
    assert client.get("/").status_code == 403


def test_dashboard_says_no_hosts(client: Client, viewer) -> None:
    client.force_login(viewer)
    page = client.get("/")
    assert b"No GPU hosts have registered yet" in page.content
    assert b'data-nav="audit"' not in page.content


def test_redis_down_still_renders(client: Client, viewer, settings) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    client.force_login(viewer)
    page = client.get("/")
    assert page.status_code == 200
    assert b"Live data is unavailable" in page.content


def test_every_page_of_the_menu_renders_for_an_admin(client: Client, admin_user) -> None:
    """A template error on a page no other test opens is still a 500 for every user."""
    client.force_login(admin_user)
    pages = ["/", "/deployments/", "/deployments/new/", "/models/", "/playground/", "/audit/"]
    pages += ["/gpus/topology/"]
    for path in pages:
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
    admin_user.is_staff = admin_user.is_superuser = True  # what ensure_admin makes
    admin_user.save()
    assert client.get("/admin/").status_code == 200
