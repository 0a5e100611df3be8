"""The Django project: settings, URLs, the ASGI app and web server, the Celery app, roles,
audit, the dashboard, and the ``hostworker`` command.

Both sides: every web process and every host worker loads its settings and Celery app. It
wires the apps together (urls, routing, asgi, hostworker), so it may import any of them; the
apps import only its shared parts (audit, roles, the Celery app, consumers, models,
``redisconn``). The host worker's start-up is in ``host/``.
"""

from controlpanel.celery import app as celery_app

__all__ = ["celery_app"]
