"""The usage tests' fleet of two teams (tests.support.team_fleet)."""

from tests.support.team_fleet import make_fleet

__all__ = ["make_fleet"]
