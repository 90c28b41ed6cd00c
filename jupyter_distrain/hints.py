"""Known failures: what the frameworks' own errors say (each met in a real run), with what to do next. A failed
job whose message holds one shows its hint under the reason (the job's `hint`: its view, `distrain get`)."""

from __future__ import annotations

KNOWN_FAILURES = (
    ("Found no NVIDIA driver",  # PyTorch's, moving a tensor to CUDA on a machine without a GPU
     "the code asks for a GPU where there is none: give the job GPUs (resources.gpus) on a backend that has "
     "them, or let the code use the CPU when torch.cuda.is_available() is false"),
    ("`keras.optimizers.legacy` is not supported in Keras 3",
     "Keras 3 has no legacy optimizers: use keras.optimizers' own, or add tf_keras to the requirements and set "
     "TF_USE_LEGACY_KERAS=1 in the job's env"),
    ("set_dtypes(): incompatible function arguments",  # Paddle 3's new IR, under a legacy static-graph loader
     "Paddle 3's new IR (PIR) breaks legacy static-graph data loaders: set FLAGS_enable_pir_api=0 in the job's "
     "env"),
)


def hint(message: str) -> str | None:
    """What to do next about a failure whose message holds a known one; None otherwise."""
    return next((said for known, said in KNOWN_FAILURES if known in message), None)
