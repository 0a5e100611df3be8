"""Benchmarks' host side: what runs in the host worker next to the engine.

``tasks`` (``benchmarks.run``, sent by name from the web side), ``run`` (the levels driven
against the engine, figures stored as each ends), ``loadgen`` (the load generator, no Django)
and ``level_readings`` (each level's GPU figures from monitoring's history and its bottleneck
reading). The web side never imports this package (import-linter's sides contract).
"""
