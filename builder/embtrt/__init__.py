"""embtrt: Hugging Face embedding model -> NVIDIA Triton model repository."""

__version__ = "0.1.0"
