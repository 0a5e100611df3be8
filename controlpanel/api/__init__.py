"""The automation API under /api/ (django-ninja): see controlpanel.api.main."""
