"""The web side of deployments: the launch, stop and restart services, selectors, forms,
views, the live status consumer, and planned vs measured memory per leased GPU.

Runs in the web processes. Services write the row, the leases and the audit row in one
transaction and send the host worker's task by name on commit. May import ``catalog``,
``planning``, ``deployments.models``/``events``/``sealed``, monitoring and controlpanel;
never ``deployments.host`` (one exception left, the engine log panel: issue 19).
"""
