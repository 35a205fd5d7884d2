"""The codex backend against the real Codex CLI, offline: it talks to a Responses API server
on 127.0.0.1 whose answers the test scripts, and the command it is told to run really runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from interpreters import AgentError, CodexBackend, MemoryJournal, run
from op import Op, TurnRecord, agent
from op.events import ToolEnd
from tests.helpers import Recorder
from tests.servers import ScriptedServer, responses

ROOT = Path(__file__).resolve().parents[3]
CODEX = (
    ROOT
    / ".cli"
    / "node_modules"
    / "@openai"
    / "codex-linux-x64"
    / "vendor"
    / "x86_64-unknown-linux-musl"
    / "bin"
    / "codex"
)

pytestmark = pytest.mark.skipif(
    not CODEX.exists(),
    reason=f"the real Codex CLI is not installed at {CODEX} (make cli installs it)",
)


def delegate(prompt: str, options: dict[str, Any]) -> Op[Any]:
    try:
        return (yield from agent("codex", prompt, **options))
    except AgentError as exc:
        return {"kind": exc.kind, "reason": exc.record.crash_reason}


def test_a_real_codex_turn_whose_command_really_runs(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with ScriptedServer(
        [
            responses(calls=[("call_1", "exec_command", {"cmd": "echo hello > out.txt"})]),
            responses("Wrote out.txt.", usage=(30, 9)),
        ]
        + [responses("x")] * 3
    ) as srv:
        backend = _backend(srv.url)
        rec = Recorder()
        result = run(
            delegate,
            "write hello to out.txt",
            {"model": "test-model", "cwd": str(work)},
            agents={"codex": backend},
            db=MemoryJournal(),
            on_event=rec,
        )
        record = result.value
    assert isinstance(record, TurnRecord), record
    assert record.text == "Wrote out.txt." and record.session_id
    assert (work / "out.txt").read_text() == "hello\n"
    assert [(t["name"], t["status"]) for t in record.tool_calls] == [("shell", "ok")]
    assert record.usage.cost_usd is None and record.usage.input_tokens > 0
    assert [e.status for e in rec.of(ToolEnd)] == ["ok"]
    assert srv.requests[0]["path"] == "/v1/responses"


def _backend(srv_url: str, **kw: Any) -> CodexBackend:
    """The real codex, told to use the Responses API server at ``srv_url``."""
    home = (
        ROOT / ".cli" / "home"
    )  # codex refuses some setup under /tmp; keep its home in the project
    home.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(home), "CODEX_HOME": str(home), "LOCAL_KEY": "k", **kw.pop("env", {})}
    return CodexBackend(
        executable=str(CODEX),
        timeout=120,
        idle_timeout=60,
        env=env,
        extra_args=[
            "-c",
            'model_provider="local"',
            "-c",
            f'model_providers.local={{name="local", base_url="{srv_url}/v1", wire_api="responses", env_key="LOCAL_KEY"}}',
        ],
        **kw,
    )


def test_codex_confined_by_opdsl_writes_only_its_folder(tmp_path: Path) -> None:
    from interpreters.tools._sandbox import sandbox_problem

    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_problem()}")
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    cmd = f"echo inside > out.txt; echo escaped > {outside}/x.txt"
    with ScriptedServer(
        [
            responses(calls=[("call_1", "exec_command", {"cmd": cmd})]),
            responses("Done.", usage=(30, 9)),
        ]
        + [responses("x")] * 3
    ) as srv:
        result = run(
            delegate,
            "write files",
            {"model": "test-model", "cwd": str(work), "confine": True},
            agents={"codex": _backend(srv.url)},
            db=MemoryJournal(),
        )
    record = result.value
    assert isinstance(record, TurnRecord), record
    assert (work / "out.txt").read_text() == "inside\n"
    assert not (outside / "x.txt").exists()


def test_codex_runs_its_commands_without_bubblewrap_on_the_machine(tmp_path: Path) -> None:
    import shutil

    bin_dir = tmp_path / "bin"  # a PATH with a shell and its tools, but no bwrap
    bin_dir.mkdir()
    for tool in ("bash", "sh", "env", "echo", "cat", "ls"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    work = tmp_path / "work"
    work.mkdir()
    with ScriptedServer(
        [
            responses(calls=[("call_1", "exec_command", {"cmd": "echo hello > out.txt"})]),
            responses("Wrote out.txt.", usage=(30, 9)),
        ]
        + [responses("x")] * 3
    ) as srv:
        # codex's own sandbox, not opdsl's: the way it runs on a machine without bubblewrap
        backend = _backend(srv.url, env={"PATH": str(bin_dir)}, confine=False)
        result = run(
            delegate,
            "write hello to out.txt",
            {"model": "test-model", "cwd": str(work)},
            agents={"codex": backend},
            db=MemoryJournal(),
        )
    record = result.value
    assert isinstance(record, TurnRecord), record
    assert (work / "out.txt").read_text() == "hello\n"


@pytest.mark.parametrize("prompt", ["-x", "--version", '--config=model_provider="evil"', "resume"])
def test_a_prompt_the_real_cli_would_take_for_an_option_reaches_the_model(
    tmp_path: Path, prompt: str
) -> None:
    """Given as its last argument, `--version` printed the version, `--config=` set the
    configuration, `-x` was refused and `resume` ran the resume subcommand; on standard input
    each is the prompt, word for word."""
    with ScriptedServer([responses("plain answer")] * 3) as srv:
        result = run(
            delegate,
            prompt,
            {"model": "test-model", "cwd": str(tmp_path)},
            agents={"codex": _backend(srv.url)},
            db=MemoryJournal(),
        )
    assert isinstance(result.value, TurnRecord), result.value
    assert result.value.text == "plain answer"
    texts = [
        part["text"]
        for item in srv.requests[0]["input"]
        if item.get("role") == "user"
        for part in item["content"]
        if part.get("type") == "input_text"
    ]
    assert texts[-1] == prompt


def test_codex_confined_writes_of_its_home_only_its_own_folder(tmp_path: Path) -> None:
    """A home of the user's own (no CODEX_HOME): Codex keeps its state in ``~/.codex``, and
    its commands cannot write the rest, a shell's startup file among them."""
    import shutil

    from interpreters.tools._sandbox import sandbox_problem

    if sandbox_problem() is not None:
        pytest.skip(f"bubblewrap cannot run here: {sandbox_problem()}")
    home = ROOT / ".cli" / f"home-{tmp_path.name}"  # codex refuses some setup under /tmp
    home.mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    cmd = f"echo inside > out.txt; echo planted > {home}/.bashrc"
    try:
        with ScriptedServer(
            [
                responses(calls=[("call_1", "exec_command", {"cmd": cmd})]),
                responses("Done.", usage=(30, 9)),
            ]
            + [responses("x")] * 3
        ) as srv:
            backend = _backend(srv.url, env={"HOME": str(home), "CODEX_HOME": ""})
            result = run(
                delegate,
                "write files",
                {"model": "test-model", "cwd": str(work), "confine": True},
                agents={"codex": backend},
                db=MemoryJournal(),
            )
        record = result.value
        assert isinstance(record, TurnRecord), record
        assert (work / "out.txt").read_text() == "inside\n"
        assert not (home / ".bashrc").exists()
        assert "Read-only file system" in record.tool_calls[0]["output"]
        assert (home / ".codex").is_dir() and any((home / ".codex").iterdir())
    finally:
        shutil.rmtree(home, ignore_errors=True)
