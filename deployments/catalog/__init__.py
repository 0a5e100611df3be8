"""The model catalog: models from the Hub (``hub``) and local folders, their ``ModelSpec``,
the Models pages, the plan panel and the ``plan`` command.

Web side (views, selectors, the plan panel's JSON) and the command line; the host worker
uses ``sources`` and nothing else here. May import ``deployments.planning``,
``deployments.models`` and monitoring's models and selectors (the planner's inventory of
registered hosts); never ``deployments.host``.
"""
