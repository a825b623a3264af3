"""What an exported model must carry to be used alone: input size, preprocessing and class names.

Both formats keep the same string map: ONNX in `metadata_props`, a torch.export program in an
extra file of its archive. A runtime reads it back into `ModelInfo` and prepares images exactly as
the PyTorch path does.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from vitlab.model import Preprocessing, ViTConfig

INPUT_NAME = "images"  # float32 (B, C, H, W), already resized, cropped and normalised
OUTPUT_NAME = "logits"  # float32 (B, K)
KEYS = ("model_name", "image_size", "num_classes", "class_names", "preprocessing", "producer")


@dataclass
class ModelInfo:
    """Everything needed to turn an image into the exported model's input and its output into labels."""

    image_size: tuple[int, int]
    num_classes: int
    preprocessing: Preprocessing
    class_names: list[str] | None = None
    model_name: str | None = None

    @classmethod
    def of(cls, config: ViTConfig) -> ModelInfo:
        return cls(config.image_size, config.num_classes, config.preprocessing, config.class_names, config.name)

    def to_strings(self) -> dict[str, str]:
        from vitlab import __version__

        return {
            "model_name": self.model_name or "",
            "image_size": json.dumps(list(self.image_size)),
            "num_classes": str(self.num_classes),
            "class_names": json.dumps(self.class_names),
            "preprocessing": json.dumps(asdict(self.preprocessing)),
            "producer": f"vitlab {__version__}",
        }

    @classmethod
    def from_strings(cls, values: dict[str, str], source: str) -> ModelInfo:
        missing = [key for key in KEYS if key not in values]
        if missing:
            raise ValueError(f"{source}: not exported by vitlab (metadata lacks {', '.join(missing)})")
        height, width = json.loads(values["image_size"])
        return cls(
            image_size=(int(height), int(width)),
            num_classes=int(values["num_classes"]),
            preprocessing=Preprocessing(**json.loads(values["preprocessing"])),
            class_names=json.loads(values["class_names"]),
            model_name=values["model_name"] or None,
        )

    def label(self, index: int) -> str:
        return self.class_names[index] if self.class_names else f"class {index}"
