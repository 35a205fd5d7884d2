"""The driver imports and runs inside Temporal's default workflow sandbox with nothing of opdsl
passed through (only the third-party libraries its values are made of: pydantic, which the
default passes through already, returns and anyio): it imports no HTTP, console, git or SQLite
library, reads no environment, and runs a program with ``par``, ``timeout`` and state on the
workflow's own loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.interpreters.temporal.conftest import Server

ROOT = Path(__file__).resolve().parents[3]

WORKFLOW = """
from temporalio import workflow


@workflow.defn(name="strict-driver")
class StrictDriver:
    @workflow.run
    async def run(self) -> list[str]:
        import sys

        from interpreters.journal._memory import MemoryJournal
        from interpreters.runtime import AsyncioScheduler, Handlers, Redactor, Services, execute
        from interpreters.temporal._workflow import TemporalClock
        from op import Failure, Inc, get, par, sleep, timeout, update
        from state import CRDTModel, GCounter

        class Tally(CRDTModel):
            n: GCounter = GCounter()

        class Nothing(Handlers):
            async def perform(self, effect, call):
                if effect.kind == "sleep":
                    await call.clock.sleep(effect.seconds)
                return None

        def branch():
            yield from update(n=Inc(1))

        def program():
            yield from par(branch(), branch())
            late = yield from timeout(0.5, sleep(3600))
            state = yield from get(Tally)
            return [str(state.n.value), type(late.failure()).__name__ if isinstance(late, Failure) else "?"]

        result = await execute(
            program, (), {}, run_id="strict", state=Tally(),
            services=Services(
                handlers=Nothing(), journal=MemoryJournal(), clock=TemporalClock(),
                scheduler=AsyncioScheduler(), interruptible=False, redactor=Redactor.from_env({}),
            ),
        )
        heavy = sorted(m for m in ("rich", "httpx", "git", "aiohttp", "sqlite3", "apsw") if m in sys.modules)
        return [result.status, *result.value, *heavy]
"""


RUNNER = """
import asyncio, json, os, sys, uuid

import interpreters.runtime  # pydantic's lazily imported parts, on the host
import strict_workflow
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions


async def main() -> None:
    client = await Client.connect(sys.argv[1])
    restrictions = SandboxRestrictions.default.with_passthrough_modules("returns", "anyio", "sniffio")
    async with Worker(
        client,
        task_queue="strict",
        workflows=[strict_workflow.StrictDriver],
        workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
    ):
        run = client.execute_workflow(
            "strict-driver", id="strict-" + uuid.uuid4().hex[:6], task_queue="strict"
        )
        # a refusal fails the workflow task again and again: give up, and say so
        print(json.dumps(await asyncio.wait_for(run, 60)))


asyncio.run(main())
# the Temporal client's native threads can abort a finishing process (temporalio/sdk-python#300)
sys.stdout.flush()
os._exit(0)
"""


def test_the_driver_runs_in_the_default_sandbox(temporal: Server, tmp_path: Path) -> None:
    # in a process of its own: pytest's import hook (assertion rewriting) cannot run inside
    # the sandbox, and would be what failed
    (tmp_path / "strict_workflow.py").write_text(WORKFLOW)
    (tmp_path / "runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "runner.py"), temporal.target],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == ["completed", "2", "TimedOut"]
