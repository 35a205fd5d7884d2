"""The redactor, where the runtime first kept it: it lives in :mod:`interpreters._redact`,
below the journal and the runtime alike (the journal's export redacts too)."""

from interpreters._redact import REDACTED, SECRET_MARKERS, Redactor, looks_secret

__all__ = ["REDACTED", "SECRET_MARKERS", "Redactor", "looks_secret"]
