"""Errors raised by the planner for input it cannot plan (bad config, nonsense numbers)."""


class PlanningError(ValueError):
    """Input the planner cannot work with; the message is one line meant for a user."""


class ModelSpecError(PlanningError):
    """A model config that lacks or contradicts the fields the planner needs."""


class InventorySpecError(PlanningError):
    """A GPU inventory or ``--gpus`` spec that cannot be read."""
