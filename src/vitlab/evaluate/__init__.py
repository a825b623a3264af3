"""Evaluating models: accuracy over a dataset, predictions for images and (streamed, resumable) for
files and folders of them, few-shot linear evaluation and linear probes of the frozen representation."""

from .fewshot import FewShotResult, extract_features, fewshot_accuracy, fit_least_squares
from .file_prediction import PredictedFiles, predict_files
from .linear_probe import LinearProbeResult, evaluate_representation, linear_probe
from .metrics import Evaluation, describe_top5, evaluate, topk_correct
from .predict import Prediction, predict_images

__all__ = [
    "Evaluation",
    "FewShotResult",
    "LinearProbeResult",
    "PredictedFiles",
    "Prediction",
    "describe_top5",
    "evaluate",
    "evaluate_representation",
    "extract_features",
    "fewshot_accuracy",
    "fit_least_squares",
    "linear_probe",
    "predict_files",
    "predict_images",
    "topk_correct",
]
