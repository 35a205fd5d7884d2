"""The programs and tools of ``bench/temporal.py``, in a module of their own: Temporal's
workflow sandbox imports a program's module again, and refuses one that touches the process
(paths, arguments) as the bench script does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

from op import Op, tool


def noop(i: int) -> int:
    return i


def program(n: int) -> Op[int]:
    total = 0
    for i in range(n):
        total += int((yield from tool("noop", {"i": i})).output)
    return total


async def pause(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "ok"


def slow_program() -> Op[int]:
    for _ in range(8):
        yield from tool("pause", {"seconds": 0.5})
    return 8


# -- a long conversation on plain Temporal (no opdsl), next to opdsl's ------------------------
#
# The same model and tool as ``tests.fixtures.conversation_programs.reader`` (``answer`` and
# ``read_chunk``), as a workflow written by hand: the conversation is kept in the workflow and
# the model activity is sent the message it reads (the last one), since a plain workflow that
# sent the whole conversation would pass Temporal's payload limit long before 1,000 turns.

PLAIN = "bench.plain_reader"


@dataclass
class PlainTurn:
    message: dict[str, Any]
    turns: int


@activity.defn(name="bench.plain_infer")
async def plain_infer(turn: PlainTurn) -> dict[str, Any]:
    from op import Message
    from tests.fixtures.conversation_programs import answer

    reply = answer([Message.model_validate(turn.message)], turn.turns)
    return reply.model_dump(mode="json")


@activity.defn(name="bench.plain_tool")
async def plain_tool(i: int) -> str:
    from tests.fixtures.conversation_programs import read_chunk

    return read_chunk(i)


@workflow.defn(name=PLAIN)
class PlainReader:
    @workflow.run
    async def run(self, turns: int) -> str:
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "You read files."},
            {"role": "user", "content": "Read the file."},
        ]
        while True:
            reply = await workflow.execute_activity(
                plain_infer,
                PlainTurn(history[-1], turns),
                start_to_close_timeout=timedelta(minutes=1),
            )
            history.append(
                {"role": "assistant", "content": reply["text"], "tool_calls": reply["tool_calls"]}
            )
            if not reply["tool_calls"]:
                return f"{reply['text']} in {len(history)} messages"
            for call in reply["tool_calls"]:
                output = await workflow.execute_activity(
                    plain_tool,
                    int(call["arguments"]["i"]),
                    start_to_close_timeout=timedelta(minutes=1),
                )
                history.append({"role": "tool", "content": output, "tool_call_id": call["id"]})
