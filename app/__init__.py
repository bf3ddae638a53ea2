"""ContextLens: see and control what reaches a local model's context window."""

__version__ = "0.1.0"
