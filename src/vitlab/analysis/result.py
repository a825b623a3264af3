"""What `analyze` hands back and writes: the figures, tables and numbers of one report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .report import ReportFigure, ReportTable


@dataclass
class AnalysisResult:
    figures: list[ReportFigure] = field(default_factory=list)
    tables: list[ReportTable] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    json_path: Path | None = None
    html_path: Path | None = None


def rounded(values: torch.Tensor | np.ndarray, digits: int = 5) -> list:
    """Values as a nested list for analysis.json, rounded so the file stays readable."""
    return np.round(np.asarray(values, dtype=np.float64), digits).tolist()
