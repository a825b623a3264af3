"""Evaluating models: accuracy over a dataset, predictions for images, few-shot linear evaluation
and linear probes of the frozen representation."""

from .fewshot import FewShotResult, extract_features, fewshot_accuracy, fit_least_squares
from .linear_probe import LinearProbeResult, evaluate_representation, linear_probe
from .metrics import Evaluation, describe_top5, evaluate, topk_correct
from .predict import Prediction, predict_images

__all__ = [
    "Evaluation",
    "FewShotResult",
    "LinearProbeResult",
    "Prediction",
    "describe_top5",
    "evaluate",
    "evaluate_representation",
    "extract_features",
    "fewshot_accuracy",
    "fit_least_squares",
    "linear_probe",
    "predict_images",
    "topk_correct",
]
