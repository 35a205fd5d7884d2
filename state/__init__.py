"""CRDTs and CRDT-backed state models. Pure: no I/O.

The types and their merge rules are described in :mod:`state._crdt`; state models and the
operations programs use on them in :mod:`state._model`.
"""

from state._canonical import NotSerializable, canonical_json, dump_jsonable, to_jsonable
from state._crdt import (
    CRDT,
    GCounter,
    GSet,
    Log,
    LogEntry,
    LWWRegister,
    MVEntry,
    MVRegister,
    ORMap,
    ORSet,
    PNCounter,
    Stamp,
)
from state._model import (
    Add,
    Append,
    Assign,
    At,
    CRDTModel,
    Dec,
    FieldOp,
    Inc,
    Remove,
    StateError,
    apply_op,
)

__all__ = [
    "CRDT",
    "Add",
    "Append",
    "Assign",
    "At",
    "CRDTModel",
    "Dec",
    "FieldOp",
    "GCounter",
    "GSet",
    "Inc",
    "LWWRegister",
    "Log",
    "LogEntry",
    "MVEntry",
    "MVRegister",
    "NotSerializable",
    "ORMap",
    "ORSet",
    "PNCounter",
    "Remove",
    "StateError",
    "Stamp",
    "apply_op",
    "canonical_json",
    "dump_jsonable",
    "to_jsonable",
]
