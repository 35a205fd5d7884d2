"""The workspace's command tool: allowlisted, inside bubblewrap, with timeouts."""

from __future__ import annotations

import os
import sys

from interpreters.runtime._redact import Redactor, looks_secret
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
        # the model may shorten a command's time, never lengthen it past the workspace's
        limit = self.timeout if timeout is None else max(0.0, min(float(timeout), self.timeout))
        problem = sandbox_problem()
        if problem is None:
            try:
                argv = bwrap_argv(
                    argv,
                    root=self.root,
                    cwd=where,
                    network=self.network,
                    read_only=tuple(sorted(self.guarded_paths)),
                )
            except SiblingsVisible as exc:
                say_once(f"opdsl: workspace commands are refused: {exc}")
                return _fail(f"commands cannot run here: {exc}")
        elif self.confine:
            say_once(
                f"opdsl: workspace commands are refused: {problem}; set OPDSL_UNCONFINED=1 "
                "(or Workspace(confine=False)) to run them unconfined, with the allowlist only"
            )
            return _fail(f"commands cannot run here: they must be confined and {problem}")
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

        try:
            end = await run_process(
                argv,
                cwd=where,
                env=self._env(),
                timeout=limit,
                idle_timeout=self.idle_timeout,
                grace=self.grace,
                consume=keep,
                merge_stderr=True,
            )
        except OSError as exc:
            return _fail(f"cannot start {program!r}: {exc.strerror or exc}")
        reason = {
            "timeout": f"timed out after {limit:g}s",
            "idle": f"no output for {self.idle_timeout:g}s",
        }.get(end.ending)
        text = self._redact(b"".join(chunks).decode("utf-8", "replace"))
        if len(text) > self.max_output:
            text = (
                text[: self.max_output] + f"\n[output cut: {size - self.max_output:,} more bytes]"
            )
        if reason is not None:
            return ToolResult.failure(
                f"{reason}; the command and its children were killed", output=text
            )
        code = end.returncode
        if code != 0:
            return ToolResult.failure(f"exit code {code}", output=text)
        return ToolResult(output=text)
