"""Deployments: a model served by an engine on leased GPUs, from its plan to its stop.

The package is split by side (docs/architecture.md): ``planning`` is pure (the memory model
and plan search); ``catalog`` and ``lifecycle`` are the web side (models and plans; launch,
stop and the deployment pages); ``host`` is what runs in a host worker (engines and their
process groups). What both sides use stays here: ``models`` (deployments, GPU leases, the
timeline and its compare-and-set transition), ``events`` (state pushed to browsers after
commit) and ``sealed`` (a launcher's Hub token at rest).

Imports run one way: ``planning`` imports nothing of the project and no framework;
``catalog`` and ``lifecycle`` never import ``host`` (the web sends the host worker its tasks
by name); the modules of a package import each other without cycles. import-linter holds
these (pyproject.toml).
"""
