"""A pickle refusal names the global it refused and never repeats torch's advice to load with
weights_only=False, the one thing that would run the payload."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from helpers import MarkerPayload
from vitlab.weights import CheckpointError
from vitlab.weights.files import read_state_dict

pytestmark = pytest.mark.unit


class SystemCall:
    def __reduce__(self):
        return (os.system, ("true",))


class Eval:
    def __reduce__(self):
        return (eval, ("1 + 1",))


@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.parametrize(
    "write, named",
    [
        (lambda p, m: torch.save({"w": torch.zeros(2), "x": SystemCall()}, p), "posix.system"),
        (lambda p, m: torch.save({"w": torch.zeros(2), "x": MarkerPayload(m)}, p), "io.open"),
        (
            lambda p, m: p.write_bytes(pickle.dumps({"w": Eval()}, protocol=2)),
            "__builtin__.eval",
        ),  # as protocol 2 names it
        (lambda p, m: p.write_bytes(pickle.dumps({"w": Eval()}, protocol=4)), "builtins.eval"),
    ],
    ids=["torch-save-system", "torch-save-open", "plain-pickle-eval", "plain-pickle-protocol-4"],
)
def test_a_pickle_refusal_names_the_global_without_torchs_advice(tmp_path, write, named):
    path, marker = tmp_path / "evil.pth", tmp_path / "pwned"
    write(path, marker)
    with pytest.raises(CheckpointError) as refused:
        read_state_dict(path)
    message = str(refused.value)
    assert f"evil.pth: refused to unpickle: it names {named}, which could run code" in message, message
    assert "weights_only" not in message and "likely succeed" not in message and "\n" not in message
    assert not marker.exists()
