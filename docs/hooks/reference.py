"""The site's generated reference pages: the command line from vitlab's parser, the run configuration
from its dataclasses and the Python API from `vitlab.__all__` (vitlab.cli.reference writes them),
added to the build as pages of their own; nothing is written into docs/."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

SOURCE = Path(__file__).resolve().parents[2] / "src"  # the tree being documented, first on the path
sys.path.insert(0, str(SOURCE))


def on_files(files: Files, config) -> Files:
    from vitlab.cli import build_parser
    from vitlab.cli.reference import api_reference, cli_reference, config_reference
    from vitlab.training.config import TrainConfig

    pages = {
        "reference/cli.md": cli_reference(build_parser()),
        "reference/config.md": config_reference(TrainConfig),
        "reference/api.md": api_reference(),
    }
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files
