"""The registers in a state's JSON, read without its class.

A state model's JSON (``CRDTModel.canonical()``, a run's ``final_state_json``, a checkpoint's
``state``) holds each field as its CRDT's JSON. A last-writer-wins register's holds its value
and the Lamport time it was written at (:class:`~state.LWWRegister`: ``value``, ``lamport``,
``replica``), which is what tells a register from the other CRDTs. Readers that have the JSON
but not the class (``opdsl show``) find a state's registers here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from state._crdt import LWWRegister

__all__ = ["REGISTER_KEYS", "register_values"]

REGISTER_KEYS = frozenset({"value", "lamport"})
"""The keys that make a field's JSON a register's: its value, and the time it was written."""

assert LWWRegister.model_fields.keys() >= REGISTER_KEYS  # the register's own fields


def register_values(state: object) -> dict[str, Any]:
    """The value of every register among a state's fields, by field name in the state's order
    (a state that is not a JSON object has none).

    Example:
        >>> register_values({"step": {"value": "verify", "lamport": 3, "replica": "r"},
        ...                  "done": {"counts": {"r": 2}}})
        {'step': 'verify'}
    """
    if not isinstance(state, Mapping):
        return {}
    return {
        name: field["value"]
        for name, field in state.items()
        if isinstance(field, Mapping) and field.keys() >= REGISTER_KEYS
    }
