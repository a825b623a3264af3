"""vitlab's version, at the root and importing nothing, so that any layer can name it (file metadata,
the Hub's library_version); pyproject.toml holds the same number."""

__version__ = "0.1.0"
