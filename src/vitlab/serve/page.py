"""The Gradio page: upload an image, see the top-5 classes and where the model looked.

The upload is a plain file box, so that whatever a user drops in reaches vitlab's own checks and
a bad file gets a sentence on the page instead of a crash or a bare "Error" toast.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from vitlab.data import BadImageError

from .classify import ImageClassifier

EMPTY_MESSAGE = "Upload an image to classify it."
UPLOAD_TTL_S = 3600


def build_page(classifier: ImageClassifier, title: str) -> gr.Blocks:
    config = classifier.model.config
    height, width = config.image_size

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
        gr.Markdown(
            f"# {title}\nA Vision Transformer ({config.dim} wide, {config.depth} layers, "
            f"{config.num_classes} classes) sees the image at {height} x {width}. The overlay is "
            "Attention Rollout (Abnar & Zuidema 2020; the paper's Fig. 6): where the classifier's token draws "
            "its information from, over all layers."
        )
        with gr.Row():
            with gr.Column():
                upload = gr.File(label="Image", type="filepath", elem_id="upload")
                message = gr.Markdown(EMPTY_MESSAGE, elem_id="message")
                labels = gr.Label(num_top_classes=classifier.top_k, label="Top classes", elem_id="top")
            with gr.Column():
                seen = gr.Image(label="What the model sees", type="pil", interactive=False, elem_id="model-input")
                overlay = gr.Image(label="Attention rollout", type="pil", interactive=False, elem_id="overlay")
        upload.upload(on_upload, inputs=upload, outputs=[labels, seen, overlay, message], api_name=False)
        upload.clear(lambda: (None, None, None, EMPTY_MESSAGE), outputs=[labels, seen, overlay, message], api_name=False)
    return page
