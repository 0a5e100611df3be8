"""GPU monitoring: backends (``gpus``), the sampler, history in Redis, live fan-out to
websockets, the dashboard and topology pages, and the Prometheus export.

Both sides: ``worker`` (register, heartbeat, sample and publish, with ``sampler`` and
``gpus``) runs in the host worker; the pages, consumers and live fan-out run in the web
processes. Never imports ``deployments`` or ``playground``: the host worker hands it a
pgid → deployment lookup by a dotted path in settings (SHARDBOARD_ENGINE_PGIDS).
"""
