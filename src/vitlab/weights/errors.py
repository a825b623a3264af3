"""The one error every checkpoint reader raises: it names the file and what does not fit."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, or whose keys or shapes do not fit the model."""
