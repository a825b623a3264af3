"""Model FLOPs per image, the numerator of model FLOPs utilisation (MFU).

Counted by torch.utils.flop_counter on the meta device (no memory, no time) for the full ViT: every
layer over every token, as the peers compute it. The same count is used for every implementation;
vitlab's forward skips the last layer's rows other than the class token, so that saving shows as a
higher MFU rather than a smaller FLOP count.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from vitlab.model import BiTConfig, ViTConfig, create_untrained


def model_flops(config: ViTConfig | BiTConfig, train: bool = False) -> int:
    """FLOPs for one image: the forward pass, or forward + backward when `train`; any model
    create_untrained builds (ViT, hybrid, Axial-ViT, BiT ResNet)."""
    with torch.device("meta"):
        model = create_untrained(config)
        images = torch.empty(1, config.in_channels, *config.image_size)
    with FlopCounterMode(display=False) as counter:
        logits = model.forward_head(model.forward_features(images))
        if train:
            logits.sum().backward()
    return counter.get_total_flops()
