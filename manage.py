#!/usr/bin/env python
"""Django's command-line utility for Shardboard."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    from controlpanel.env import ConfigError

    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        sys.stderr.write(f"shardboard: configuration error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
