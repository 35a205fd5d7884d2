"""Ready programs, written only against ``op`` and ``state``."""
