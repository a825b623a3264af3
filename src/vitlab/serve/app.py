"""The web demo's server: a FastAPI app with `POST /predict` for programs and the Gradio page at /.

    POST /predict   body: the image file's bytes (any Content-Type)
                    200 {"top": [{"label": "cat", "prob": 0.93}, ...]}   (5 classes, most likely first)
                    400 {"error": "..."} not an image / unreadable; 413 {"error": "..."} above the upload limit

Gradio is told to stay offline: no analytics, no server-side rendering (which would need Node),
and the system's fonts instead of web fonts.
"""

from __future__ import annotations

import ipaddress
import logging
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # read when gradio is imported: no calls home

import gradio as gr  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402
from starlette.concurrency import run_in_threadpool  # noqa: E402

from vitlab.data import BadImageError  # noqa: E402

from .classify import ImageClassifier, Limits  # noqa: E402
from .page import build_page  # noqa: E402

log = logging.getLogger("vitlab")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
SYSTEM_FONTS = ["ui-sans-serif", "system-ui", "sans-serif"]
SYSTEM_MONO_FONTS = ["ui-monospace", "monospace"]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def build_app(classifier: ImageClassifier, title: str) -> FastAPI:
    limit = classifier.limits.max_bytes
    app = FastAPI(title=title, docs_url=None, redoc_url=None)  # the docs pages load their scripts from a CDN

    @app.post("/predict")
    async def predict(request: Request) -> JSONResponse:
        declared = request.headers.get("content-length", "")
        too_large = f"request body is above the upload limit of {limit / 2**20:.0f} MiB"
        if declared.isdigit() and int(declared) > limit:
            return _error(413, too_large)
        body = bytearray()
        async for chunk in request.stream():  # counted as it arrives: a missing Content-Length is no way round
            body.extend(chunk)
            if len(body) > limit:
                return _error(413, too_large)
        if not body:
            return _error(400, "empty request body; send the image file's bytes")
        try:
            prediction = await run_in_threadpool(classifier.classify, bytes(body), "request body", False)
        except BadImageError as error:
            return _error(400, str(error))
        return JSONResponse(prediction.as_json())

    theme = gr.themes.Default(font=SYSTEM_FONTS, font_mono=SYSTEM_MONO_FONTS)
    return gr.mount_gradio_app(
        app, build_page(classifier, title), path="/", max_file_size=limit, ssr_mode=False, theme=theme,
        mcp_server=False, enable_monitoring=False, pwa=False,
    )


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def serve(classifier: ImageClassifier, title: str, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Run the app until interrupted."""
    import uvicorn

    if not is_loopback(host):
        log.warning("serving on %s: every machine that can reach this one can use the demo", host)
    log.info("vitlab serve: http://%s:%d/ (page), POST http://%s:%d/predict (JSON)", host, port, host, port)
    uvicorn.run(build_app(classifier, title), host=host, port=port, log_level="warning")


__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ImageClassifier", "Limits", "build_app", "serve"]
