"""Answering a run that waits on ``ask``: which question an answer is for.

The answer itself is journaled when the resumed program reaches the question again
(``_resume.aresume``), so a resume that diverges first leaves the run waiting as it was.
"""

from __future__ import annotations

from interpreters.journal._base import Entry, json_object
from op import Ask, OpdslError

__all__ = ["question_to_answer"]


def question_to_answer(run_id: str, entries: list[Entry], at: str | None) -> str:
    """The address of the question an answer is for: the only one open, or the one at ``at``."""
    pending = [e for e in entries if e.kind == Ask.kind and e.status == "started"]
    if not pending:
        raise OpdslError(f"run {run_id} is not waiting for an answer")
    shown = "; ".join(
        f"at {e.address}: {json_object(e.effect_json).get('question')!r}" for e in pending
    )
    if at is not None:
        if at not in {e.address for e in pending}:
            raise OpdslError(f"run {run_id} has no open question at address {at}; open: {shown}")
        return at
    if len(pending) > 1:
        raise OpdslError(
            f"run {run_id} waits on {len(pending)} questions ({shown}); say which with "
            f"--at ADDRESS (answer_at= in the API)"
        )
    return pending[0].address
