"""The one error the lifecycle services raise for a refusal."""


class DeploymentError(Exception):
    """Refused before anything started; the message says why and what to change."""
