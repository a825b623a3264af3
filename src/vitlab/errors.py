"""The error types every layer of vitlab raises; the CLI prints each as one line."""


class ConfigError(ValueError):
    """A configuration value that cannot describe a working model."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or whose keys or shapes do not fit the model."""
