"""The OpenAI-compatible ``/v1/`` gateway: its own lean ASGI handler in every web process.

Admission (a personal token or the browser session, the target deployment, a per-user slot
in Redis), the relay of the engine's answer as it streams, and one audit row per request,
written off the event loop. Web side. May import the rest of ``playground`` (its models and
tokens), ``deployments.models``, the engine adapters' capabilities and controlpanel (roles,
audit); nothing of monitoring.
"""
