"""`python pause_checkpoint_write.py STEP ARGS` is `python -m vitlab ARGS` whose checkpoint of step STEP
stops half-way: half its bytes written to the temporary file and flushed to disk, a line saying so on
stderr (PAUSED), then a wait to be killed, as a machine failure mid-write would find it
(test_faults_kill.py). The fault is injected here, in the test's process, not in vitlab.
"""

from __future__ import annotations

import io
import os
import runpy
import sys
import time

import torch

from vitlab.training.checkpoint import FORMAT

PAUSED = "paused writing checkpoint"
_save = torch.save


def pausing_save(document, file, *args, **kwargs):
    if isinstance(document, dict) and document.get("format") == FORMAT and document.get("step") == STEP:
        buffer = io.BytesIO()
        _save(document, buffer, *args, **kwargs)
        data = buffer.getvalue()
        file.write(data[: len(data) // 2])
        file.flush()
        os.fsync(file.fileno())
        print(f"{PAUSED} {file.name} after {len(data) // 2} of {len(data)} bytes", file=sys.stderr, flush=True)
        time.sleep(600)
    return _save(document, file, *args, **kwargs)


if __name__ == "__main__":
    STEP = int(sys.argv.pop(1))
    torch.save = pausing_save
    runpy.run_module("vitlab", run_name="__main__", alter_sys=True)
