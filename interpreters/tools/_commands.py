"""The workspace's command tools: allowlisted, inside bubblewrap, with timeouts, the locked
files checked around each command; and ``run_test``, a step's test as a program's judge."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import final

from interpreters._redact import Redactor, looks_secret
from interpreters.tools import _pytest_report
from interpreters.tools._files import _Files
from interpreters.tools._paths import (
    WorkspaceError,
    _fail,
    say_once,
)
from interpreters.tools._process import run_process
from interpreters.tools._sandbox import SiblingsVisible, bwrap_argv, sandbox_problem
from op import ToolResult

__all__ = ["_Commands"]


class _Commands(_Files):
    # -- commands ---------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # only what a build or a test runner needs, never the rest of the parent's environment
        env = {}
        for name, value in os.environ.items():
            if looks_secret(name, self.secret_names):
                continue
            if name in self.pass_env or name.startswith("LC_"):
                env[name] = value
        # no .pyc files: they would litter the repository, and one written by an earlier
        # command can look current after an edit (same size, same second)
        env.update(
            {
                "PAGER": "cat",
                "GIT_PAGER": "cat",
                "CI": "1",
                "TQDM_DISABLE": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        return env

    def _redact(self, text: str) -> str:
        return Redactor.from_env(extra_names=self.secret_names)(text)

    async def run(
        self, command: list[str] | str, cwd: str = ".", timeout: float | None = None
    ) -> ToolResult:
        """Run an allowed command in the workspace (an argument list; a string only when the
        program allows a shell). Answers its exit code and output."""
        checked = self._command(command, cwd)
        if isinstance(checked, ToolResult):
            return checked
        argv, program, where = checked
        # the model may shorten a command's time, never lengthen it past the workspace's
        limit = self.timeout if timeout is None else max(0.0, min(float(timeout), self.timeout))
        return (await self._execute(argv, program, where, limit)).result

    async def run_test(self, command: list[str], cwd: str = ".") -> ToolResult:
        """Run a test command as a program's judge of a step (allowlisted like ``run``).

        A pytest command (``pytest ...``, ``python -m pytest ...``) runs on opdsl's own
        interpreter in a way no file of the workspace can change: ``python -I`` (so a
        ``pytest.py`` or ``sitecustomize.py`` there is not loaded in pytest's place), no cache
        (``-p no:cacheprovider``), compiled files kept outside the workspace, no ``PYTEST_*``
        variable; it passes only when the report it writes outside the workspace says that at
        least one test was collected and every collected test passed (a skip, an expected
        failure, a module skipped or broken at collection, or no report at all, is a failure),
        and it exited 0. The runner's configuration files are the workspace's own, which the
        runner lock keeps as they were. Any other command passes when it exits 0.
        """
        checked = self._command(command, cwd)
        if isinstance(checked, ToolResult):
            return checked
        argv, program, where = checked
        found = _pytest_command(argv)
        if found is None:
            return (await self._execute(argv, program, where, self.timeout)).result
        mode, args = found
        with tempfile.TemporaryDirectory(prefix="opdsl-test-") as tmp:
            place = Path(tmp).resolve()
            if place.is_relative_to(self.root):
                return _fail(
                    f"the temporary folder {place} is inside the workspace; set TMPDIR elsewhere"
                )
            report = place / "report.json"
            script = place / "opdsl_pytest_report.py"
            script.write_text(_REPORTER, encoding="utf-8")
            runner = [
                sys.executable,
                "-I",
                "-X",
                f"pycache_prefix={place / 'pycache'}",
                str(script),
                str(report),
                mode,
                "-p",
                "no:cacheprovider",
                *args,
            ]
            env = {k: v for k, v in self._env().items() if not k.startswith("PYTEST_")}
            ran = await self._execute(
                runner, program, where, self.timeout, writable=(place,), env=env
            )
            if not ran.finished:
                return ran.result
            return _judge(ran, report)

    def _command(
        self, command: list[str] | str, cwd: str
    ) -> tuple[list[str], str, Path] | ToolResult:
        """A command checked against the allowlist, with the folder it runs in."""
        if isinstance(command, str):
            if not self.shell:
                return _fail(
                    'give the command as a list of arguments, e.g. ["pytest", "-q"]; no shell is allowed here'
                )
            argv = ["/bin/sh", "-c", command]
            program = command.strip().split(" ", 1)[0] if command.strip() else ""
        else:
            argv = list(command)
            program = argv[0] if argv else ""
        if not program:
            return _fail("an empty command")
        if os.path.basename(program) not in self.allow:
            return _fail(
                f"{program!r} is not an allowed command here; allowed: {', '.join(self.allow)}"
            )
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable  # the interpreter opdsl runs on, with its packages
        try:
            where = self.resolve(cwd)
        except WorkspaceError as exc:
            return _fail(str(exc))
        if not where.is_dir():
            return _fail(f"{cwd} is not a directory")
        return argv, program, where

    async def _execute(
        self,
        argv: list[str],
        program: str,
        where: Path,
        limit: float,
        *,
        writable: tuple[Path, ...] = (),
        env: dict[str, str] | None = None,
    ) -> _Ran:
        """Run ``argv`` confined, its output capped and redacted, the locked files checked
        before and after (what it changed among them is put back, and it fails)."""
        problem = sandbox_problem()
        if problem is None:
            try:
                argv = bwrap_argv(
                    argv,
                    root=self.root,
                    cwd=where,
                    network=self.network,
                    writable=writable,
                    read_only=tuple(sorted(self.guarded_paths)),
                )
            except SiblingsVisible as exc:
                say_once(f"opdsl: workspace commands are refused: {exc}")
                return _Ran(_fail(f"commands cannot run here: {exc}"))
        elif self.confine:
            say_once(
                f"opdsl: workspace commands are refused: {problem}; set OPDSL_UNCONFINED=1 "
                "(or Workspace(confine=False)) to run them unconfined, with the allowlist only"
            )
            return _Ran(_fail(f"commands cannot run here: they must be confined and {problem}"))
        else:
            say_once(
                f"opdsl: workspace commands are NOT confined ({problem}): only the allowlist "
                "limits them"
            )
        chunks: list[bytes] = []
        size = 0

        def keep(data: bytes) -> bool:
            nonlocal size
            if size < self.max_output * 2:  # enough to cut at max_output once decoded
                chunks.append(data)
            size += len(data)
            return False

        before = self.lock_state()
        broke: list[str] = []
        try:
            end = await run_process(
                argv,
                cwd=where,
                env=self._env() if env is None else env,
                timeout=limit,
                idle_timeout=self.idle_timeout,
                grace=self.grace,
                consume=keep,
                merge_stderr=True,
            )
        except OSError as exc:
            return _Ran(_fail(f"cannot start {program!r}: {exc.strerror or exc}"))
        finally:
            # whatever ended the command (cancelled too), what it did to locked files is undone
            if before or self.locks():
                broke = self.put_back(before, self.lock_state())
                if broke:
                    self.breaches.append(f"{program} changed {', '.join(broke)}")
        reason = {
            "timeout": f"timed out after {limit:g}s",
            "idle": f"no output for {self.idle_timeout:g}s",
        }.get(end.ending)
        text = self._redact(b"".join(chunks).decode("utf-8", "replace"))
        if len(text) > self.max_output:
            text = (
                text[: self.max_output] + f"\n[output cut: {size - self.max_output:,} more bytes]"
            )
        if broke:
            return _Ran(
                ToolResult.failure(
                    f"the command changed locked files, which were put back: {', '.join(broke)}; "
                    "the program does not allow changing them",
                    output=text,
                )
            )
        if reason is not None:
            return _Ran(
                ToolResult.failure(
                    f"{reason}; the command and its children were killed", output=text
                )
            )
        code = end.returncode
        if code != 0:
            return _Ran(ToolResult.failure(f"exit code {code}", output=text), code, text)
        return _Ran(ToolResult(output=text), code, text)


@final
@dataclass(frozen=True, slots=True)
class _Ran:
    """A command's result; ``code`` is set when it ran to its end untouched (exit status,
    no timeout, no locked file changed)."""

    result: ToolResult
    code: int | None = None
    text: str = ""

    @property
    def finished(self) -> bool:
        return self.code is not None


def _pytest_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """``("module" | "script", pytest's arguments)`` when ``argv`` runs pytest, else None."""
    name = os.path.basename(argv[0])
    if name in ("pytest", "py.test"):
        return "script", argv[1:]
    python = name in ("python", "python3") or argv[0] == sys.executable
    if python and argv[1:3] == ["-m", "pytest"]:
        return "module", argv[3:]
    return None


def _judge(ran: _Ran, report: Path) -> ToolResult:
    """The verdict of a pytest run from the report it wrote (see ``run_test``)."""
    text, code = ran.text, ran.code
    try:
        with open(report, "rb") as f:
            raw = f.read(_REPORT_CAP + 1)
    except FileNotFoundError:
        return ToolResult.failure(
            f"pytest ended (exit code {code}) without writing its report: it did not run to its "
            "end (os._exit, a crash or a signal in the code under test, or its reporting was "
            "turned off)",
            output=text,
        )
    try:
        if len(raw) > _REPORT_CAP:
            raise ValueError("too large")
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        if isinstance(data.get("error"), str):
            return ToolResult.failure(f"pytest cannot run: {data['error']}", output=text)
        collected = data["collected"]
        outcomes = data["outcomes"]
        collection = data["collection"]
        if not (
            (collected is None or all(isinstance(n, str) for n in collected))
            and isinstance(outcomes, dict)
            and isinstance(collection, dict)
        ):
            raise ValueError("fields of the wrong type")
    except (ValueError, KeyError, TypeError) as exc:
        return ToolResult.failure(f"pytest's report is unreadable ({exc})", output=text)
    if collected is None:
        return ToolResult.failure(
            f"pytest ended before it collected the tests (exit code {code})", output=text
        )
    wrong = [
        f"{node} ({'not collected: an error' if how == 'error' else 'skipped at collection'})"
        for node, how in collection.items()
    ]
    wrong += [
        f"{n} ({outcomes.get(n, 'not run')})" for n in collected if outcomes.get(n) != "passed"
    ]
    passed = sum(1 for n in collected if outcomes.get(n) == "passed")
    summary = f"pytest: {len(collected)} collected, {passed} passed"
    if not collected:
        return ToolResult.failure(f"{summary}: no test was collected", output=text)
    if wrong or code != 0:
        shown = ", ".join(wrong[:10]) + (f" and {len(wrong) - 10} more" if len(wrong) > 10 else "")
        return ToolResult.failure(
            f"{summary}, exit code {code}"
            + (f"; not passed: {shown}" if wrong else "")
            + "; every collected test must pass",
            output=text,
        )
    return ToolResult(output=f"{summary}\n{text}")


_REPORT_CAP = 16 * 1024 * 1024

_REPORTER = Path(_pytest_report.__file__).read_text(encoding="utf-8")
"""The reporter's source, read once when this module loads: a copy is run from outside the
workspace, so a workspace that holds opdsl's own source cannot change how a test is judged."""
