"""A worker process for the long-conversation tests: the reading program, its tool and model,
on a task queue of a Temporal server, with the content store ``OPDSL_TEMPORAL_CONTENT`` names.

    python -m tests.interpreters.temporal.conversation_worker HOST:PORT QUEUE TURNS

Prints one line once it serves, then serves until it is killed or interrupted.
"""

from __future__ import annotations

import asyncio
import os
import sys

from interpreters.temporal import connect, make_worker
from tests.fixtures.conversation_programs import TOOLS, ReadingModel

READER = "tests.fixtures.conversation_programs:reader"


async def main(target: str, queue: str, turns: int) -> None:
    client = await connect(target)
    worker = make_worker(
        client,
        task_queue=queue,
        programs=[READER],
        tools=TOOLS,
        model=ReadingModel(turns),
        passthrough=("tests", "programs"),
    )
    async with worker:
        print(f"serving {queue} as {os.getpid()}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    except KeyboardInterrupt:
        pass
    finally:
        sys.stdout.flush()
        os._exit(0)  # the Temporal client's threads can abort a finishing process
