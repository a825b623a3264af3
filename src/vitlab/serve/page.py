"""The Gradio page: upload an image, see the top-5 classes and where the model looked.

The upload is a plain file box, so that whatever a user drops in reaches vitlab's own checks and
a bad file gets a sentence on the page instead of a crash or a bare "Error" toast.

A request names the uploaded file by its path on the server, and Gradio copies whatever path a request
names into its cache before any handler runs (its own check that the path was uploaded stays off
in an app mounted on FastAPI): a crafted request could have the server read any file, block its
event loop on a FIFO or spin on /dev/zero. The file box here takes a regular file inside Gradio's
upload folder and nothing else, and refuses any other path before it is opened.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import gradio as gr
from starlette.concurrency import run_in_threadpool

from vitlab.bounded_read import read_bounded, regular_size
from vitlab.data import BadImageError
from vitlab.errors import RefusedFileError
from vitlab.model import BiTConfig, ViTConfig

from .classify import ImageClassifier

log = logging.getLogger("vitlab")

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


def check_uploaded(path: str, upload_folder: str) -> None:
    """Refuse, without opening it, any `path` but a regular file inside `upload_folder` (links resolved),
    and any URL, which Gradio would fetch."""
    folder, real = os.path.realpath(upload_folder), os.path.realpath(path)
    if "://" in path or os.path.commonpath([real, folder]) != folder:
        log.warning("serve: refused a request naming %r, which is not a file uploaded to this page", path)
        raise gr.Error("the request names a file that was not uploaded to this page", print_exception=False)
    try:
        regular_size(real, what="an uploaded image")
    except (RefusedFileError, OSError) as error:
        log.warning("serve: refused a request naming %r (%s)", path, error)
        raise gr.Error("the request names an upload that is not a readable file", print_exception=False) from None


def uploads_only(box: gr.File) -> gr.File:
    """`box` made to accept a file uploaded to this page and no other path, checked in a worker thread
    before Gradio copies anything. The box's own methods are wrapped: a subclass of a Gradio component
    would have Gradio write a .pyi stub beside this module when it is imported."""
    move_async, move = box.async_move_resource_to_block_cache, box.move_resource_to_block_cache

    async def checked_async(url_or_file_path: str | Path | None) -> str | None:
        if url_or_file_path is not None:
            await run_in_threadpool(check_uploaded, str(url_or_file_path), box.GRADIO_CACHE)
        return await move_async(url_or_file_path)

    def checked(url_or_file_path: str | Path | None) -> str | None:
        if url_or_file_path is not None:
            check_uploaded(str(url_or_file_path), box.GRADIO_CACHE)
        return move(url_or_file_path)

    setattr(box, "async_move_resource_to_block_cache", checked_async)  # noqa: B010 - mypy refuses a method assignment
    setattr(box, "move_resource_to_block_cache", checked)  # noqa: B010
    return box


def build_page(classifier: ImageClassifier, title: str) -> gr.Blocks:
    config = classifier.model.config

    def on_upload(path: str | None):
        if not path:
            return None, None, None, EMPTY_MESSAGE
        file = Path(path)
        try:
            classifier.check_size(file.stat().st_size, file.name)  # before reading it into memory
            data = read_bounded(file, classifier.limits.max_bytes, "an uploaded image")
            result = classifier.classify(data, name=file.name)
        except (BadImageError, RefusedFileError) as error:
            return None, None, None, f"**Could not classify `{file.name}`:** {error.reason}"
        best, prob = result.top[0]
        scores = {label: p for label, p in result.top}
        return scores, result.model_input, result.overlay, f"**{best}** ({prob:.1%}) for `{file.name}`"

    # Gradio keeps each upload in its temp folder; files older than an hour are removed every hour.
    with gr.Blocks(title=title, delete_cache=(UPLOAD_TTL_S, UPLOAD_TTL_S)) as page:
        gr.Markdown(f"# {title}\n{describe(config)}")
        with gr.Row():
            with gr.Column():
                upload = uploads_only(gr.File(label="Image", type="filepath", elem_id="upload"))
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
