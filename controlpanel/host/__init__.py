"""The host worker's own wiring: what ``manage.py hostworker`` starts. Host side only.

The management command (Django finds it only under ``management/commands/``) parses its
arguments and calls ``worker.run``; everything that runs in the worker is reached from here.
"""
