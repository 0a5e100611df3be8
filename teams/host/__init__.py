"""Teams' host side: the monthly quota check each host worker runs (``tasks``: the task
``teams.enforce_quotas`` and the loop; ``enforcement``: flag and stop what is over). The web
side never imports this package (import-linter's sides contract).
"""
