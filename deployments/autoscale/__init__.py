"""Autoscaling: a deployment's scaling policy, the controller that follows it, its figures.

`decide` and `quantiles` are pure (no Django, no I/O, no clock); `scrape` reads an engine's
/metrics; `controller` runs one pass over every policy (called by the host workers' leased
loop, deployments.host.autoscaler); `series` keeps the figures the deployment page charts.
"""
