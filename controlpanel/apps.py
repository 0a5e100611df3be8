from django.apps import AppConfig


class ControlPanelConfig(AppConfig):
    name = "controlpanel"
    verbose_name = "Shardboard"

    def ready(self) -> None:
        from controlpanel import signals  # noqa: F401  (login/logout audit receivers)
