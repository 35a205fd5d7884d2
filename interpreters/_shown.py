"""Run text made safe to show on a terminal.

Whatever a run recorded (a tool's output, a model's answer, a name, an id from an imported
file) may hold terminal control sequences: ``ESC ]0;...`` retitles the window, ``ESC [2J``
clears the screen, a right-to-left override reorders what the reader sees. Everything opdsl
prints from a run or a journal goes through :func:`visible` first, which writes each such
character as an escape (``\\x1b``, ``\\u202e``) instead. Rich markup is the other half:
run text reaches rich only as :class:`rich.text.Text`, never as a markup string.
"""

from __future__ import annotations

import re

__all__ = ["visible"]

# C0 controls but tab and line feed, DEL, C1 controls, the bidirectional formatting
# characters (the "Trojan Source" ones), and lone surrogates (no character: a terminal's
# UTF-8 cannot take one, and a journal written before opdsl refused them may hold one)
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_CONTROL_OR_BREAK = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object, *, lines: bool = True) -> str:
    """``text`` (made a string with ``str``) with every control character written as an
    escape. ``lines``: tabs and line breaks stay as they are (an answer, an output); without,
    they are escaped too (an id, a name: one line whatever it holds).

    Example:
        >>> visible("run \\x1b]0;owned\\x07 done")
        'run \\\\x1b]0;owned\\\\x07 done'
        >>> visible("two\\nlines"), visible("two\\nlines", lines=False)
        ('two\\nlines', 'two\\\\x0alines')
    """
    s = text if isinstance(text, str) else str(text)
    pattern = _CONTROL if lines else _CONTROL_OR_BREAK
    return pattern.sub(_escape, s) if pattern.search(s) else s
