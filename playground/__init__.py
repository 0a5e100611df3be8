"""The playground: the page where an operator tries prompts against running deployments
(chat or completion, two side by side), personal API tokens and the runs it records.

Web side. ``gateway`` is the OpenAI-compatible ``/v1/`` that the page and API clients call.
May import ``deployments.models``, the engine adapters' capabilities and controlpanel
(roles, audit); nothing of monitoring.
"""
