"""The Triton Inference Server target: a model repository with a ``config.pbtxt`` per model (see docs/deploy.md)."""
