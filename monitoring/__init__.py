"""GPU monitoring: backends (``gpus``), the sampler, history in Redis, live fan-out to
websockets, the dashboard and topology pages, and the Prometheus export.

Both sides: ``host/`` (``worker``: register, heartbeat, sample and publish, with the
``sampler`` and the ``history_writer``) runs in the host worker, as do the ``gpus`` backends
(their sample types are shared); the pages, consumers and live fan-out run in the web
processes and never import ``host``. Never imports ``deployments`` or ``playground``: the
host worker hands it a pgid → deployment lookup by a dotted path in settings
(SHARDBOARD_ENGINE_PGIDS).
"""
