"""What runs in a host worker (``manage.py hostworker``, one per GPU machine).

The launch, stop and restart task bodies (``tasks``, ``engine_control``), the state
transitions of the host side, the automatic restart policy, the watchdog and reconcile,
failure diagnosis, the owner marker on engines, ``engines`` (one adapter per engine) and
``supervisor`` (engine process groups). Nothing here renders a page; the web reaches it only
through Celery tasks on the host's queue, sent by name. May import ``deployments.models``,
``events``, ``sealed``, ``catalog.sources``, monitoring's worker (the GPU backend) and
controlpanel.
"""
