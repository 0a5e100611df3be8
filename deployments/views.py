"""Views of this app: the catalog is in catalog_views, deployments in deployment_views."""
