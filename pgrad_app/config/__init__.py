"""Configuration: typed setting values, YAML files, run settings, the tuned per-env tables and the
plug-ins a user names (env modules, transforms). Imports only :mod:`pgrad_app.errors` below it."""
