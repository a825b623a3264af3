"""The web demo's server: a FastAPI app with `POST /predict` for programs and the Gradio page at /.

    POST /predict   body: the image file's bytes (any Content-Type), or a multipart form with one file
                    (`curl -F file=@x.png`)
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
from starlette.datastructures import UploadFile  # noqa: E402
from starlette.exceptions import HTTPException  # noqa: E402
from starlette.formparsers import MultiPartException  # noqa: E402
from starlette.requests import ClientDisconnect  # noqa: E402

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


async def form_upload(request: Request, body: bytes) -> tuple[bytes, str]:
    """The one file of a multipart form (`curl -F file=@x.png`), parsed by Starlette from the body
    already read within the upload limit; ValueError says what is wrong with the form."""

    async def replay() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=1, max_fields=10)
    except (HTTPException, MultiPartException) as error:
        raise ValueError(
            f"not a readable multipart form ({getattr(error, 'detail', None) or getattr(error, 'message', error)})"
        ) from None
    files = [(key, value) for key, value in form.multi_items() if isinstance(value, UploadFile)]
    if len(files) != 1:
        raise ValueError(f"a multipart form needs exactly one file field (e.g. curl -F file=@x.png), got {len(files)}")
    key, upload = files[0]
    return await upload.read(), f"form field {key!r} ({upload.filename or 'unnamed'})"


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
        try:
            async for chunk in request.stream():  # counted as it arrives: a missing Content-Length is no way round
                body.extend(chunk)
                if len(body) > limit:
                    return _error(413, too_large)
        except ClientDisconnect:  # nobody to answer; one line instead of the ASGI server's traceback
            log.info("POST /predict: the client disconnected after %d bytes of the upload", len(body))
            return _error(400, "client disconnected")
        if not body:
            return _error(400, "empty request body; send the image file's bytes")
        data, name = bytes(body), "request body"
        if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            try:
                data, name = await form_upload(request, data)
            except ValueError as error:
                return _error(400, str(error))
        try:
            prediction = await run_in_threadpool(classifier.classify, data, name, False)
        except BadImageError as error:
            return _error(400, str(error))
        return JSONResponse(prediction.as_json())

    theme = gr.themes.Default(font=SYSTEM_FONTS, font_mono=SYSTEM_MONO_FONTS)
    return gr.mount_gradio_app(
        app,
        build_page(classifier, title),
        path="/",
        max_file_size=limit,
        ssr_mode=False,
        theme=theme,
        mcp_server=False,
        enable_monitoring=False,
        pwa=False,
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
