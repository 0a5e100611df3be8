"""The refusal every deployment service raises."""

from __future__ import annotations


class DeploymentError(Exception):
    """Refused before anything started; the message says why and what to change."""
