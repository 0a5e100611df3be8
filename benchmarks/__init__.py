"""Benchmarks of running deployments: a load generator on the host worker, figures, readings."""
