"""End to end: requests that name a server-side path instead of an upload. The page's file box used to
have Gradio copy whatever path a request named (a system file, a FIFO that blocked the event loop,
/dev/zero that spun it forever, a 200 MB file copied whole before the upload limit). Now nothing
outside the upload folder is opened, which an audit hook inside the server process records, and
`GET /` keeps answering within a second throughout."""

from __future__ import annotations

import io
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest
from PIL import Image

import vitlab
from helpers import REPO_ROOT, randomise_, serving
from vitlab.model import ViTConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

START_TIMEOUT_S = 120
ANSWER_WITHIN_S = 1.0

# The server, with an audit hook that writes down every open() of a path listed in AUDITED.
SERVER = """
import os, sys
audited = set(os.environ["AUDITED"].split(os.pathsep))
record = open(os.environ["AUDIT_LOG"], "a", buffering=1)
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)) and os.path.abspath(os.fsdecode(args[0])) in audited:
        record.write(os.fsdecode(args[0]) + "\\n")
sys.addaudithook(hook)
from vitlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 32), (200, 40, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def crafted_paths(folder: Path) -> dict[str, str]:
    fifo, big, uploads = folder / "pipe.png", folder / "big.png", folder / "uploads"
    os.mkfifo(fifo)
    with big.open("wb") as file:  # 200 MB that take no disk: a sparse file
        file.truncate(200 * 2**20)
    return {
        "a system file": "/etc/passwd",
        "a FIFO": str(fifo),
        "/dev/zero": "/dev/zero",
        "a 200 MB file": str(big),
        "a path climbing out of the upload folder": str(uploads) + "/.." * (len(uploads.parts) - 1) + "/etc/passwd",
        "a URL for the server to fetch": "http://127.0.0.1:9/x.png",
    }


class Watch(threading.Thread):
    """Asks for `GET /` every 0.2 s and keeps the slowest answer (a failure counts as infinitely slow)."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base, self.slowest, self.stop = base, 0.0, threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    ok = client.get(self.base + "/").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.slowest = max(self.slowest, time.monotonic() - started if ok else float("inf"))
                time.sleep(0.2)


def call_upload_handler(base: str, file_data: dict, timeout: float = 30) -> dict:
    """The request the page sends when a file is dropped in, with `file_data` as the file; the
    handler's completion message."""
    session = uuid.uuid4().hex
    body = {"data": [file_data], "fn_index": 0, "session_hash": session, "event_data": None, "trigger_id": None}
    joined = httpx.post(base + "/gradio_api/queue/join", json=body, timeout=timeout)
    assert joined.status_code == 200, joined.text
    with httpx.stream("GET", base + f"/gradio_api/queue/data?session_hash={session}", timeout=timeout) as events:
        for line in events.iter_lines():
            if '"process_completed"' in line:
                return httpx.Response(200, content=line.removeprefix("data:")).json()
    raise AssertionError("the event stream ended without a result")


@pytest.fixture
def server(tmp_path):
    checkpoint, uploads, audit_log = tmp_path / "ckpt", tmp_path / "uploads", tmp_path / "opened.txt"
    config = ViTConfig(image_size=32, patch_size=8, dim=32, depth=1, num_heads=2, mlp_dim=64, num_classes=3)
    vitlab.save_pretrained(randomise_(vitlab.create_model(config)), checkpoint)
    paths = crafted_paths(tmp_path)
    audited = {os.path.abspath(path) for path in paths.values() if "://" not in path}
    env = dict(
        os.environ,
        GRADIO_TEMP_DIR=str(uploads),
        AUDITED=os.pathsep.join(sorted(audited)),
        AUDIT_LOG=str(audit_log),
        PYTHONPATH=str(REPO_ROOT / "src"),
    )
    with serving([sys.executable, "-c", SERVER], checkpoint, tmp_path / "serve.log", cwd=tmp_path, env=env) as base:
        yield base, paths, uploads, audit_log


@pytest.mark.fault("hostile-input", kinds=6)
def test_a_request_naming_a_server_path_opens_nothing_and_the_page_keeps_answering(server):
    base, paths, uploads, audit_log = server
    watch = Watch(base)
    watch.start()
    try:
        for what, path in paths.items():
            result = call_upload_handler(base, {"path": path, "meta": {"_type": "gradio.FileData"}})
            assert result["success"] is False, f"{what}: the handler ran: {result}"
            assert "not uploaded to this page" in str(result.get("output", {}).get("error")), f"{what}: {result}"
            assert watch.slowest < ANSWER_WITHIN_S, f"after {what}: GET / took {watch.slowest:.2f} s"

        # What the browser does still works: upload the file, then name the path the upload gave.
        uploaded = httpx.post(base + "/gradio_api/upload", files={"files": ("red.png", png(), "image/png")}, timeout=30)
        (path,) = uploaded.json()
        result = call_upload_handler(base, {"path": path, "orig_name": "red.png", "meta": {"_type": "gradio.FileData"}})
        assert result["success"] is True and "%) for `red.png`" in result["output"]["data"][-1]
    finally:
        watch.stop.set()
        watch.join()
    assert watch.slowest < ANSWER_WITHIN_S
    opened = audit_log.read_text() if audit_log.exists() else ""
    assert opened == "", f"the server opened {opened.split()}"
    crafted = {Path(path).name for path in paths.values()}
    copied = sorted(p.name for p in uploads.rglob("*") if p.name in crafted or p.is_file() and p.stat().st_size > 2**20)
    assert copied == [], f"copied into the upload folder: {copied}"
