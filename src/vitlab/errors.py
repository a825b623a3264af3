"""The error types every layer of vitlab raises; the CLI prints each as one line."""


class ConfigError(ValueError):
    """A configuration value that cannot describe a working model."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or whose keys or shapes do not fit the model."""


class RefusedFileError(ValueError):
    """A path that is not a regular file, or a file above the size limit for its kind, refused before reading.

    `path` is the file as given and `reason` says why; readers turn it into their own error type."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self):  # both fields survive a DataLoader worker's pickling
        return (type(self), (self.path, self.reason))


class InputError(ValueError):
    """Input that vitlab cannot use: image files, data, or the arguments of a call."""
