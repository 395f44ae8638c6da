"""The classifier kind's builder layers (embtrt_backend.kinds.classifier)."""
