"""A run folder whose run has not finished (stopped, killed, still going) as a model: the newest intact
checkpoint's weights (its EMA weights where the run averages them, as the finished run would save),
so that predict, eval, export, analyze and serve take any run folder, and a checkpoint file of it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from vitlab.errors import CheckpointError
from vitlab.model import BiTConfig, BiTResNet, VisionTransformer, ViTConfig
from vitlab.weights import load
from vitlab.weights.build import build_model
from vitlab.weights.folder import CONFIG_FILE

from .atomic_files import verify_checkpoint
from .checkpoint import NAME, holds_checkpoints, load_checkpoint, newest_valid_checkpoint

log = logging.getLogger("vitlab")

EMA_PREFIX = "module."  # torch's AveragedModel keeps the averaged model under this name


def training_checkpoint(source: str | Path) -> Path | None:
    """The checkpoint file `source` stands for: the newest intact one of a run folder without a model
    folder (no config.json), or `source` itself when it is one (`RUN/checkpoints/step-00000019.pt`);
    None for anything else."""
    path = Path(source)
    if path.is_dir() and not (path / CONFIG_FILE).exists() and holds_checkpoints(path):
        return newest_valid_checkpoint(path)
    if path.is_file() and NAME.fullmatch(path.name):
        verify_checkpoint(path)
        return path
    return None


def load_training_checkpoint(path: Path, source: str, **overrides: Any) -> VisionTransformer | BiTResNet:
    """The model of training checkpoint `path`, logged with its step and the run's length."""
    document = load_checkpoint(path)
    if "model" not in document:
        raise CheckpointError(
            f"{path}: a sharded checkpoint; resume the run to its end (or to a shorter --steps) first"
        )
    data = dict(document["model_config"])
    config: ViTConfig | BiTConfig = ViTConfig.from_dict(data) if "patch_size" in data else BiTConfig.from_dict(data)
    state = document["model"]
    if document.get("ema"):
        state = {k.removeprefix(EMA_PREFIX): v for k, v in document["ema"].items() if k.startswith(EMA_PREFIX)}
    schedule = document.get("config", {}).get("schedule", {})
    length = f"{schedule['steps']} steps" if schedule.get("steps") else f"{schedule.get('epochs')} epochs"
    log.info(
        "%s: an unfinished run; using checkpoint %s, step %d (of a run of %s)%s",
        source,
        path.name,
        document["step"],
        length,
        ", its EMA weights" if document.get("ema") else "",
    )
    return build_model(config, state, f"{source} (step {document['step']})", overrides)


def load_model(source: str | Path, **overrides: Any) -> VisionTransformer | BiTResNet:
    """vitlab.load's model of `source`, or, for an unfinished run's folder or checkpoint file, its
    training checkpoint's: what --ckpt and model.init read."""
    path = training_checkpoint(source)
    return load(source, **overrides) if path is None else load_training_checkpoint(path, str(source), **overrides)
