"""What an exported model carries to be used alone: input size, preprocessing, class names and
the whole vitlab config.

Both formats keep the same string map: ONNX in `metadata_props`, a torch.export program in an
extra file of its archive. The readable keys serve any runtime; `vitlab_config` (the ViTConfig or
BiTConfig as JSON, `vitlab_config_kind` saying which) lets vitlab rebuild the config and prepare
images exactly as the PyTorch path does. Files written before BiT ResNets were exported have no
kind: they hold ViTs (hybrids included), which is how they are read.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from vitlab.config_fields import crop_mode_for
from vitlab.model import BiTConfig, ViTConfig

INPUT_NAME = "images"  # float32 (B, C, H, W), already resized, cropped and normalised
OUTPUT_NAME = "logits"  # float32 (B, K)
CONFIG_KEY = "vitlab_config"
KIND_KEY = "vitlab_config_kind"
CONFIG_KINDS: dict[str, type[ViTConfig] | type[BiTConfig]] = {"ViTConfig": ViTConfig, "BiTConfig": BiTConfig}


def metadata_strings(config: ViTConfig | BiTConfig) -> dict[str, str]:
    from vitlab.version import __version__

    return {
        "model_name": config.name or "",
        "image_size": json.dumps(list(config.image_size)),
        "num_classes": str(config.num_classes),
        "class_names": json.dumps(config.class_names),
        # the crop mode evaluation applies, for runtimes that do not know vitlab's rule for a null one
        "preprocessing": json.dumps(
            asdict(config.preprocessing)
            | {"crop_mode": crop_mode_for(config.image_size, config.preprocessing.crop_mode)}
        ),
        "producer": f"vitlab {__version__}",
        CONFIG_KEY: json.dumps(config.to_dict()),
        KIND_KEY: type(config).__name__,
    }


def config_from_metadata(values: dict[str, str], source: str) -> ViTConfig | BiTConfig:
    if CONFIG_KEY not in values:
        raise ValueError(f"{source}: not exported by vitlab (its metadata has no {CONFIG_KEY})")
    kind = values.get(KIND_KEY, "ViTConfig")
    if kind not in CONFIG_KINDS:
        raise ValueError(f"{source}: unknown {KIND_KEY} {kind!r}; this vitlab reads {', '.join(CONFIG_KINDS)}")
    return CONFIG_KINDS[kind].from_dict(json.loads(values[CONFIG_KEY]))
