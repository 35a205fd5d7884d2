"""The effect algebra as an interpreter meets it: the unions (``AnyEffect``, ``LeafEffect``,
``ScopeEffect``, ``StateEffect``), the classes and kinds derived from them, the request a model
is asked (``ModelRequest``), and the errors of a program that is not one. A program author
needs none of this: the effects themselves and their constructors are in :mod:`op`.

Example:
    >>> from op.effects import LEAF_KINDS, SCOPE_KINDS
    >>> "infer" in LEAF_KINDS and "par" in SCOPE_KINDS
    True
"""

from op._effects import (
    EFFECT_TYPES,
    LEAF_KINDS,
    LEAF_TYPES,
    SCOPE_KINDS,
    STATE_KINDS,
    AnyEffect,
    Effect,
    LeafEffect,
    ScopeEffect,
    StateEffect,
)
from op._errors import NotAnEffect, NotAProgram, NotSerializable
from op._values import RAW_ARGUMENTS, ModelRequest

__all__ = [
    "EFFECT_TYPES",
    "LEAF_KINDS",
    "LEAF_TYPES",
    "RAW_ARGUMENTS",
    "SCOPE_KINDS",
    "STATE_KINDS",
    "AnyEffect",
    "Effect",
    "LeafEffect",
    "ModelRequest",
    "NotAProgram",
    "NotAnEffect",
    "NotSerializable",
    "ScopeEffect",
    "StateEffect",
]
