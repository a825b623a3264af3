"""Generate data/head_counts.json from the ViT architectures timm and torchvision define.

    python -m vitlab.weights.head_table [--check]

Every architecture is built on the meta device (no memory for its weights), its state dict read
as vitlab reads a file of it, and its signature recorded with what the shapes do not show: head
count, activation, block kind and pooling. Architectures vitlab cannot hold are left out (the
reader refuses them before it looks at the table). Needs timm (the `test` extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from vitlab.errors import CheckpointError

from .head_counts import TABLE_FILE

# timm's modules whose models are its VisionTransformer class (plain, DeiT, hybrids).
TIMM_MODULES = ("timm.models.vision_transformer", "timm.models.deit", "timm.models.vision_transformer_hybrid")
TORCHVISION_MODELS = ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14")
# timm's class -> vitlab's act
ACTIVATIONS = {"GELU": "gelu", "GELUTanh": "gelu_tanh", "QuickGELU": "quick_gelu", "SiLU": "silu"}


def timm_names() -> list[str]:
    import timm
    from timm.models import model_entrypoint

    return [name for name in timm.list_models() if model_entrypoint(name).__module__ in TIMM_MODULES]


def timm_architectures() -> Iterator[tuple[str, Callable[[], torch.nn.Module]]]:
    import timm

    for name in timm_names():
        yield name, functools.partial(timm.create_model, name, weight_init="skip")  # shapes only


def torchvision_architectures() -> Iterator[tuple[str, Callable[[], torch.nn.Module]]]:
    import torchvision.models

    for name in TORCHVISION_MODELS:
        yield name, functools.partial(getattr(torchvision.models, name))


# The models are read by their libraries' attribute names, which nn.Module's typing cannot follow: Any.
def timm_behaviour(model: Any) -> dict[str, Any]:
    block = model.blocks[0]
    act = type(block.mlp.act).__name__
    return {
        "num_heads": block.attn.num_heads,
        "act": ACTIVATIONS.get(act, act),
        "norm_eps": block.norm1.eps,
        "block": "pre-norm" if type(block).__name__ == "Block" else type(block).__name__,
        "global_pool": model.global_pool,
    }


def torchvision_behaviour(model: Any) -> dict[str, Any]:
    return {
        "num_heads": model.encoder.layers[0].self_attention.num_heads,
        "act": "gelu",
        "norm_eps": model.encoder.layers[0].ln_1.eps,
        "block": "pre-norm",
        "global_pool": "token",
    }


def signature_of(library: str, state: dict[str, torch.Tensor], name: str):
    """The signature vitlab's reader computes for a file of this state dict (raises if refused)."""
    from .timm import timm_signature
    from .torchvision import torchvision_signature

    return (timm_signature if library == "timm" else torchvision_signature)(state, name)


def entries() -> Iterator[dict[str, Any]]:
    sources = (
        ("timm", timm_architectures, timm_behaviour),
        ("torchvision", torchvision_architectures, torchvision_behaviour),
    )
    for library, architectures, behaviour in sources:
        for name, build in architectures():
            with torch.device("meta"):
                model = build()
            try:
                signature = signature_of(library, model.state_dict(), name)
            except CheckpointError:
                continue  # vitlab cannot hold it: refused before the table is read
            yield {"model": name, "signature": dataclasses.asdict(signature), **behaviour(model)}


def table() -> dict[str, Any]:
    import timm
    import torchvision

    return {
        "generated_by": "python -m vitlab.weights.head_table",
        "generated_from": {"timm": timm.__version__, "torchvision": torchvision.__version__},
        "architectures": list(entries()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs")
    args = parser.parse_args(argv)
    text = json.dumps(table(), indent=1) + "\n"
    if args.check:
        same = TABLE_FILE.read_text() == text
        print(f"{TABLE_FILE.name}: {'up to date' if same else 'differs; regenerate it'}")
        return 0 if same else 1
    TABLE_FILE.parent.mkdir(exist_ok=True)
    TABLE_FILE.write_text(text)
    print(f"wrote {TABLE_FILE.name}: {len(json.loads(text)['architectures'])} architectures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
