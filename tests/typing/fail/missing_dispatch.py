# A handler whose dispatch forgets an effect must not type-check (assert_never).
# expect-mypy: Argument 1 to "assert_never" has incompatible type "Ask"
# expect-pyright: Argument of type "Ask" cannot be assigned to parameter "arg" of type "Never"
from typing import Any, assert_never

from interpreters.models.kit import CallInfo as Call
from interpreters.runtime import Handlers
from op import Agent, Checkpoint, Emit, Infer, Now, Patched, Random, Sleep, Tool, Uuid
from op.effects import LeafEffect


class Forgetful(Handlers):
    async def perform(self, effect: LeafEffect, call: Call) -> Any:
        match effect:
            case (
                Infer()
                | Tool()
                | Agent()
                | Emit()
                | Checkpoint()
                | Now()
                | Random()
                | Uuid()
                | Sleep()
                | Patched()
            ):
                return None
            case _:
                assert_never(effect)
