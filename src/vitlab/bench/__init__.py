"""The side-by-side benchmark: vitlab against timm, transformers and torchvision on the same cases."""

from .harness import BenchConfig, CaseSpec, run_bench
from .implementations import IMPLEMENTATIONS
from .presets import PRESETS
from .report import markdown, write
from .steps import Case, Mode

__all__ = ["BenchConfig", "Case", "CaseSpec", "IMPLEMENTATIONS", "Mode", "PRESETS", "markdown", "run_bench", "write"]
