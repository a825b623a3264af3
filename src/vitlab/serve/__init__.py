"""The web demo: a Gradio page (upload -> top-5 classes + Attention Rollout overlay) and a JSON
`POST /predict` endpoint, served by one FastAPI app bound to loopback unless told otherwise."""

from .classify import ImageClassifier, Limits, Prediction

__all__ = ["ImageClassifier", "Limits", "Prediction"]
