"""The config-field engine moved to vitlab.config_fields; these names stay importable from here."""

from vitlab.config_fields import ConfigError, check_fields, coerce, describe, from_mapping, show

__all__ = ["ConfigError", "check_fields", "coerce", "describe", "from_mapping", "show"]
