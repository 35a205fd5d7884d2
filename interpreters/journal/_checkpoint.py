"""What a completed ``checkpoint`` entry records as its result, as a typed value.

The layout is a JSON object, the one every opdsl version has written::

    {"state": <the state as JSON, or null>,
     "state_type": <its class as a reference, or null>,
     "replica": <the replica's id>, "lamport": <its Lamport time>,
     "world": <what the handlers kept, or null>}

``world`` is the handlers' own (the live handlers keep the workspace's git tree:
``{"workspace": ROOT, "tree": TREE}``, a :class:`WorkspaceSnapshot`). Journals written before
checkpoints kept a world have no ``world`` key, and read as keeping none. A fork restores the
state and the replica's Lamport time from here, and the world through the handlers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CheckpointSnapshot", "SnapshotError", "WorkspaceSnapshot"]


class SnapshotError(ValueError):
    """A checkpoint's recorded result is not a snapshot (the message says what is wrong)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceSnapshot:
    """The world the live handlers keep at a checkpoint: the workspace's files as a git tree.

    Example:
        >>> WorkspaceSnapshot(workspace="/src/app", tree="4b825dc6").to_json()
        {'workspace': '/src/app', 'tree': '4b825dc6'}
    """

    workspace: str | None
    """The workspace's root (None in a world that did not say it)."""
    tree: str

    def to_json(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "tree": self.tree}

    @classmethod
    def from_world(cls, world: object) -> WorkspaceSnapshot | None:
        """``world`` as a workspace snapshot, or None when it is not one (no tree, or a world
        other handlers keep)."""
        if not isinstance(world, Mapping):
            return None
        tree, root = world.get("tree"), world.get("workspace")
        if not isinstance(tree, str) or not tree:
            return None
        return cls(workspace=root if isinstance(root, str) else None, tree=tree)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointSnapshot:
    """A checkpoint's snapshot: the run's state (as JSON) with its type, the replica's id and
    Lamport time, and the world the handlers kept.

    Example:
        >>> snap = CheckpointSnapshot(state={"n": 1}, replica="r", lamport=3)
        >>> CheckpointSnapshot.from_json(snap.to_json()) == snap
        True
        >>> CheckpointSnapshot.read('{"state": null, "replica": "r", "lamport": 0}').world is None
        True
    """

    state: Any = None
    """The state as JSON (``to_jsonable``), None for a run without state."""
    state_type: Any = None
    """The state's class as a JSON reference, None for a run without state."""
    replica: str | None = None
    lamport: int = 0
    world: Any = None
    """What the handlers' checkpoint returned (JSON), None when they kept nothing."""

    def to_json(self) -> dict[str, Any]:
        """The journaled layout (the keys every version has written)."""
        return {
            "state": self.state,
            "state_type": self.state_type,
            "replica": self.replica,
            "lamport": self.lamport,
            "world": self.world,
        }

    @property
    def files(self) -> WorkspaceSnapshot | None:
        """The workspace snapshot this checkpoint kept, if its world is one."""
        return WorkspaceSnapshot.from_world(self.world)

    @classmethod
    def from_json(cls, data: object) -> CheckpointSnapshot:
        """The snapshot a checkpoint recorded, from its parsed JSON; a :class:`SnapshotError`
        saying what is wrong when it is not one."""
        if not isinstance(data, Mapping):
            raise SnapshotError(f"a checkpoint's snapshot is a JSON object, not {_kind(data)}")
        lamport = data.get("lamport", 0)
        if isinstance(lamport, bool) or not isinstance(lamport, int):
            raise SnapshotError(f"a checkpoint's lamport is a whole number, not {lamport!r}")
        replica = data.get("replica")
        if replica is not None and not isinstance(replica, str):
            raise SnapshotError(f"a checkpoint's replica is text, not {_kind(replica)}")
        return cls(
            state=data.get("state"),
            state_type=data.get("state_type"),
            replica=replica,
            lamport=lamport,
            world=data.get("world"),
        )

    @classmethod
    def read(cls, text: str | None) -> CheckpointSnapshot | None:
        """The snapshot in a checkpoint entry's ``result_json``; None when there is none or it
        is not one (a journal someone made by hand): readers show what they can."""
        if not text:
            return None
        try:
            return cls.from_json(json.loads(text))
        except (ValueError, RecursionError):
            return None


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
