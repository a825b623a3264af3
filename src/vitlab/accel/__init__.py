"""Speed as a layer above the model: vitlab's CPU kernel choices, its own bf16 kernel, int8 linears
and the frozen, compiled inference path. The model (vitlab.model) is plain PyTorch and runs without
any of this; `accelerate(model, dtype)` swaps its parts for subclasses with the faster CPU paths,
and `optimize_for_inference(model, dtype)` compiles an accelerated copy. vitlab's own commands
(predict, eval, serve, bench, train) call them.
"""

from .fast import InferenceModel, optimize_for_inference
from .layers import accelerate

__all__ = ["InferenceModel", "accelerate", "optimize_for_inference"]
