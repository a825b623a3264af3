"""The Gradio page: upload an image, see the top-5 classes and where the model looked.

The upload is a plain file box, so that whatever a user drops in reaches vitlab's own checks and
a bad file gets a sentence on the page instead of a crash or a bare "Error" toast.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from vitlab.data import BadImageError
from vitlab.model import BiTConfig, ViTConfig

from .classify import ImageClassifier

EMPTY_MESSAGE = "Upload an image to classify it."
UPLOAD_TTL_S = 3600
ROLLOUT_WORDS = (
    "The overlay is Attention Rollout (Abnar & Zuidema 2020; the paper's Fig. 6): where the "
    "classifier's token draws its information from, over all layers."
)


def describe(config: ViTConfig | BiTConfig) -> str:
    """One sentence on the model for the page's header."""
    height, width = config.image_size
    if isinstance(config, BiTConfig):
        return (
            f"A BiT ResNet ({config.resnet.depth} layers, {config.num_classes} classes) sees the image at "
            f"{height} x {width}. It has no attention, so there is no rollout overlay."
        )
    kind = "A ResNet + ViT hybrid" if config.backbone is not None else "A Vision Transformer"
    return (
        f"{kind} ({config.dim} wide, {config.depth} layers, {config.num_classes} classes, "
        f"{config.effective_patch_size} px per token) sees the image at {height} x {width}. {ROLLOUT_WORDS}"
    )


def build_page(classifier: ImageClassifier, title: str) -> gr.Blocks:
    config = classifier.model.config

    def on_upload(path: str | None):
        if not path:
            return None, None, None, EMPTY_MESSAGE
        file = Path(path)
        try:
            classifier.check_size(file.stat().st_size, file.name)  # before reading it into memory
            result = classifier.classify(file.read_bytes(), name=file.name)
        except BadImageError as error:
            return None, None, None, f"**Could not classify `{file.name}`:** {error.reason}"
        best, prob = result.top[0]
        scores = {label: p for label, p in result.top}
        return scores, result.model_input, result.overlay, f"**{best}** ({prob:.1%}) for `{file.name}`"

    # Gradio keeps each upload in its temp folder; files older than an hour are removed every hour.
    with gr.Blocks(title=title, delete_cache=(UPLOAD_TTL_S, UPLOAD_TTL_S)) as page:
        gr.Markdown(f"# {title}\n{describe(config)}")
        with gr.Row():
            with gr.Column():
                upload = gr.File(label="Image", type="filepath", elem_id="upload")
                message = gr.Markdown(EMPTY_MESSAGE, elem_id="message")
                labels = gr.Label(num_top_classes=classifier.top_k, label="Top classes", elem_id="top")
            with gr.Column():
                seen = gr.Image(label="What the model sees", type="pil", interactive=False, elem_id="model-input")
                overlay = gr.Image(
                    label="Attention rollout",
                    type="pil",
                    interactive=False,
                    elem_id="overlay",
                    visible=classifier.has_overlay,
                )
        # api_name=False (no API endpoint) works in gradio 5 and 6; gradio 6 annotates it `str | None` only.
        upload.upload(on_upload, inputs=upload, outputs=[labels, seen, overlay, message], api_name=False)  # type: ignore[arg-type]
        upload.clear(
            lambda: (None, None, None, EMPTY_MESSAGE),
            outputs=[labels, seen, overlay, message],
            api_name=False,  # type: ignore[arg-type]
        )
    return page
