"""Monitoring's host side: what runs in a host worker (``manage.py hostworker``) only.

``worker`` registers the host, heartbeats, samples and publishes; ``sampler`` is the
drift-free loop; ``history_writer`` appends samples to the Redis history and downsamples
them. The web side never imports this package (import-linter's sides contract): it reads
what the host worker wrote through ``monitoring.history`` and ``monitoring.selectors``.
"""
