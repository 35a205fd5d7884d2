"""What a new user trips over, point by point: the README's own commands, the CLI, dry runs,
budgets and timeouts, and the test kit. Each test failed before its fix."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import git
import pytest

from interpreters import (
    Divergence,
    MemoryJournal,
    ScriptedInterpreter,
    ScriptedModel,
    SqliteJournal,
    VirtualClock,
    dry_run,
    expect,
    replay,
    resume,
    run,
)
from interpreters.cli._main import main
from op import (
    Budget,
    Op,
    Response,
    TimedOut,
    ToolCall,
    Usage,
    agent,
    checkpoint,
    infer,
    limit,
    sleep,
    timeout,
    tool,
)
from programs.coder import CoderConfig, coder
from tests.fixtures import new_user_programs as progs
from tests.helpers import sample_repo, sh
from tests.servers import ScriptedServer, openai, status

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FIX = {"path": "calc.py", "old": "return a - b", "new": "return a + b"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return sample_repo(tmp_path)


def opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def work_answers() -> list[Any]:
    return [
        openai("", [("c1", "read_file", json.dumps({"path": "calc.py"}))]),
        openai("", [("c2", "edit_file", json.dumps(FIX))]),
        openai("Fixed add()."),
        openai("Fix add() to add\n\nIt subtracted."),
    ]


# -- 1. the README's command, as written --------------------------------------------------------


def _readme_coder_command() -> str:
    text = README.read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"```sh\n(.*?)```", text, re.S)
    return next(b for b in blocks if "programs.coder:coder" in b).strip()


def test_the_readme_command_runs_the_coder_as_written(repo: Path, tmp_path: Path) -> None:
    command = _readme_coder_command()
    assert "--state" not in command  # the program names its own state
    command = command.replace("/path/to/repo", str(repo))
    with ScriptedServer(work_answers()) as srv:
        env = {
            **os.environ,
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_BASE_URL": f"{srv.url}/v1",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
        }
        out = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["ok"] and result["commit"] == git.Repo(repo).head.commit.hexsha
    # the demo prints the same command to try next
    demo = (ROOT / "interpreters" / "cli" / "_demo.py").read_text(encoding="utf-8")
    assert (
        "opdsl run programs.coder:coder --arg repo=PATH --arg task=" in demo
        and "--state" not in demo
    )


def test_a_declared_state_reaches_every_way_of_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    first = run(progs.noted, "hi", db=db)
    assert first.value == ["hi", "HI"]
    assert replay(first.run_id, db=db).value == ["hi", "HI"]
    assert resume(first.run_id, from_checkpoint="noted", db=db).value == ["hi", "HI"]
    assert dry_run(progs.noted, "x").value == ["x", "X"]
    assert ScriptedInterpreter([]).run(progs.noted, "s").value == ["s", "S"]
    code, out, err = opdsl(
        capsys,
        "run",
        "tests.fixtures.new_user_programs:noted",
        "--arg",
        "text=cli",
        "--db",
        db,
        "--quiet",
    )
    assert code == 0, err
    assert json.loads(out.splitlines()[-1]) == ["cli", "CLI"]


# -- 2. agents work in the workspace -----------------------------------------------------------


def test_an_agent_works_in_the_runs_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    fake = tmp_path / "fake-claude"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, pathlib\n"
        "pathlib.Path('hello.txt').write_text('hi')\n"
        "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 's', 'tools': [], 'mcp_servers': []}))\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'result': 'wrote it', 'num_turns': 1,"
        " 'usage': {'input_tokens': 1, 'output_tokens': 1}, 'total_cost_usd': 0.0}))\n"
    )
    fake.chmod(0o755)
    from interpreters import ClaudeCodeBackend

    def program() -> Op[str]:
        record = yield from agent("claude-code", "write hello.txt")
        return record.text

    result = run(
        program,
        agents={"claude-code": ClaudeCodeBackend(executable=str(fake))},
        workspace=ws,
        db=MemoryJournal(),
    )
    assert result.value == "wrote it", result.describe()
    assert (ws / "hello.txt").read_text() == "hi"
    assert not (elsewhere / "hello.txt").exists()


# -- 3, 4. the Coder recovers from a failing model; unknown cost stays unknown ---------------------


@pytest.mark.parametrize("failure", ["script runs out", "provider error"])
def test_a_model_failing_mid_run_leaves_the_repository_as_it_was(repo: Path, failure: str) -> None:
    before = (repo / "calc.py").read_text()
    (repo / "notes.txt").write_text("the user's own uncommitted work\n")
    edit = Response(tool_calls=(ToolCall(id="c1", name="edit_file", arguments=FIX),))
    if failure == "script runs out":
        model: Any = ScriptedModel([edit])
        result = run(
            coder, CoderConfig(task="Fix it.", repo=str(repo)), model=model, db=MemoryJournal()
        )
    else:
        with ScriptedServer(
            [openai("", [("c1", "edit_file", json.dumps(FIX))]), status(400, "bad request")]
        ) as srv:
            result = run(
                coder,
                CoderConfig(task="Fix it.", repo=str(repo)),
                db=MemoryJournal(),
                model=f"openai-compatible:local@{srv.url}/v1",
            )
    out = result.value
    assert not out.ok and out.phase == "work", out
    assert ("Error" in (out.reason or "")) or ("Exhausted" in (out.reason or ""))
    assert (repo / "calc.py").read_text() == before
    assert (repo / "notes.txt").read_text() == "the user's own uncommitted work\n"


def test_the_coders_cost_is_unknown_when_a_price_is_unknown(repo: Path) -> None:
    priced = Usage(input_tokens=10, output_tokens=5, cost_usd=0.001)
    session = [
        Response(tool_calls=(ToolCall(id="c1", name="edit_file", arguments=FIX),), usage=priced),
        Response(text="Fixed.", usage=Usage(input_tokens=10, output_tokens=5)),  # no price
        Response(text="Fix add\n\nIt subtracted.", usage=priced),
    ]
    out = run(
        coder,
        CoderConfig(task="Fix it.", repo=str(repo)),
        model=ScriptedModel(session),
        db=MemoryJournal(),
    ).value
    assert out.ok and out.cost_usd is None
    known = [Response(text=r.text, tool_calls=r.tool_calls, usage=priced) for r in session]
    sh(repo, "reset", "-q", "--hard", "HEAD~1")
    out = run(
        coder,
        CoderConfig(task="Fix it.", repo=str(repo)),
        model=ScriptedModel(known),
        db=MemoryJournal(),
    ).value
    assert out.ok and out.cost_usd == pytest.approx(0.003)


# -- 5, 6, 7. reading commands, --json, failed tools --------------------------------------------


@pytest.mark.parametrize(
    "verb",
    [
        ["runs"],
        ["show", "r1"],
        ["checkpoints", "r1"],
        ["replay", "r1"],
        ["export", "r1"],
        ["resume", "r1"],
        ["answer", "r1", "yes"],
        ["gc", "r1"],
    ],
)
def test_a_missing_journal_is_one_line_and_nothing_is_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, verb: list[str]
) -> None:
    db = tmp_path / "typo.db"
    code, _, err = opdsl(capsys, *verb, "--db", str(db))
    assert (
        code == 2
        and err.strip()
        == f"opdsl: error: no journal at {db} (give --db or $OPDSL_DB the file runs were written to)"
    )
    assert not db.exists() and list(tmp_path.iterdir()) == []


def failing_tool(path: str) -> str:
    """Always fails."""
    raise FileNotFoundError(f"no such file: {path}")


def uses_a_failing_tool() -> Op[str]:
    yield from checkpoint("start")
    result = yield from tool("failing_tool", {"path": "x.txt"})
    return result.error or ""


def test_json_output_and_failed_tools_are_marked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from rich.console import Console

    from interpreters import ConsoleSink

    db = str(tmp_path / "runs.db")
    console = Console(record=True, width=200, file=io.StringIO())
    done = run(uses_a_failing_tool, tools=[failing_tool], db=db, on_event=ConsoleSink(console))
    live = console.export_text()
    assert "tool failed" in live and "no such file: x.txt" in live
    code, out, _ = opdsl(capsys, "runs", "--db", db, "--json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == [done.run_id]
    code, out, _ = opdsl(capsys, "show", done.run_id, "--db", db, "--json")
    shown = json.loads(out)
    assert shown["status"] == "completed" and [e["address"] for e in shown["entries"]] == ["1", "2"]
    assert "no such file: x.txt" in shown["entries"][1]["tool_failed"]
    code, out, _ = opdsl(capsys, "checkpoints", done.run_id, "--db", db, "--json")
    assert json.loads(out)[0]["name"] == "start"
    # the piped table: one line a row, the failure marked with its error
    code, out, _ = opdsl(capsys, "show", done.run_id, "--db", db)
    row = next(line for line in out.splitlines() if "failing_tool" in line and "│" in line)
    assert "failed" in row and "no such file: x.txt" in row
    long = run(uses_a_failing_tool, tools=[failing_tool], db=db)
    code, out, _ = opdsl(capsys, "runs", "--db", db)
    assert sum(1 for line in out.splitlines() if long.run_id in line) == 1
    assert all(len(line) > 0 for line in out.splitlines())


# -- 8, 9. answers: which question, and a divergence changes nothing ------------------------------


def test_two_open_questions_need_an_address(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "runs.db")
    first = run(progs.two_questions, db=db)
    assert first.status == "waiting"
    code, _, err = opdsl(capsys, "answer", first.run_id, "blue", "--db", db, "--quiet")
    assert (
        code == 2
        and "waits on 2 questions" in err
        and "Which colour?" in err
        and "Which size?" in err
    )
    assert "--at" in err
    code, _, err = opdsl(
        capsys, "answer", first.run_id, "blue", "--at", "1.1.1", "--db", db, "--quiet"
    )
    assert code == 0 and "Which size?" in err  # still waiting, on the other one
    code, out, err = opdsl(capsys, "answer", first.run_id, "large", "--db", db, "--quiet")
    assert code == 0, err
    assert json.loads(out.splitlines()[-1]) == ["blue", "large"]


def asks_then_works(topic: str) -> Op[str]:
    yield from checkpoint("start")
    who = yield from ask_(topic)
    return who


def ask_(topic: str) -> Op[str]:
    from op import ask

    return (yield from ask(f"For whom is {topic}?"))


def test_an_answer_that_meets_a_divergence_leaves_the_run_waiting(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    first = run(asks_then_works, "x", db=db)
    assert first.status == "waiting"

    def changed(topic: str) -> Op[str]:
        yield from checkpoint("begin")  # renamed: the record says "start"
        return (yield from ask_(topic))

    changed.__module__, changed.__qualname__ = (
        asks_then_works.__module__,
        asks_then_works.__qualname__,
    )
    diverged = resume(first.run_id, db=db, answer="me", program=changed)
    assert diverged.status == "failed" and isinstance(diverged.error, Divergence)
    journal = SqliteJournal(db)
    assert journal.run(first.run_id).status == "waiting"
    assert [e.status for e in journal.entries(first.run_id)] == ["completed", "started"]
    assert resume(first.run_id, db=db, answer="me").value == "me"


# -- 10. inputs that gave a traceback ----------------------------------------------------------


@pytest.mark.parametrize("verb", ["run", "dry-run", "resume"])
def test_bad_inputs_are_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "bad_syntax.py").write_text("def f(:\n")
    (tmp_path / "a_file").write_text("x")
    db = str(tmp_path / "runs.db")
    ok = "tests.fixtures.new_user_programs:noted"
    base = ["run", ok, "--arg", "text=x", "--db", db, "--quiet"]
    if verb == "dry-run":
        base.append("--dry-run")
    cases: list[tuple[list[str], str]] = [
        ([*base, "--arg", "deep=" + "[" * 100_000 + "]" * 100_000], "nested too deeply"),
        (
            ["run", "raises_at_import:f", "--db", db],
            "importing raises_at_import raised RuntimeError: boom at import",
        ),
        (["run", "bad_syntax:f", "--db", db], "a syntax error in"),
        (
            [*base, "--tools", "tests.fixtures.new_user_programs:NOT_A_TOOL"],
            "is not a function or BoundTool",
        ),
        ([*base, "--workspace", str(tmp_path / "missing")], "does not exist"),
        ([*base, "--workspace", str(tmp_path / "a_file")], "is not a folder"),
    ]
    if verb == "resume":
        done = run(progs.noted, "x", db=db)
        cases = [
            (
                [
                    "resume",
                    done.run_id,
                    "--from",
                    "start",
                    "--db",
                    db,
                    "--workspace",
                    str(tmp_path / "missing"),
                ],
                "does not exist",
            ),
            (
                [
                    "resume",
                    done.run_id,
                    "--from",
                    "start",
                    "--db",
                    db,
                    "--workspace",
                    str(tmp_path / "a_file"),
                ],
                "is not a folder",
            ),
            (
                [
                    "resume",
                    done.run_id,
                    "--from",
                    "start",
                    "--db",
                    db,
                    "--tools",
                    "tests.fixtures.new_user_programs:NOT_A_TOOL",
                ],
                "is not a function or BoundTool",
            ),
        ]
    for argv, message in cases:
        code, _, err = opdsl(capsys, *argv)
        assert code == 2, (argv[:3], err)
        assert (
            err.startswith("opdsl: error: ")
            and message in err
            and len(err.strip().splitlines()) == 1
        ), err


# -- 11. divergence messages name the checkpoint and the effect ------------------------------------


def two_tools() -> Op[str]:
    yield from checkpoint("start")
    yield from tool("failing_tool", {"path": "a"})
    yield from checkpoint("middle")
    yield from tool("failing_tool", {"path": "b"})
    return "done"


def test_a_removed_effect_names_the_checkpoint_and_the_effect(tmp_path: Path) -> None:
    db = MemoryJournal()
    first = run(two_tools, tools=[failing_tool], db=db)

    def shorter() -> Op[str]:
        yield from checkpoint("start")
        yield from tool("failing_tool", {"path": "a"})
        yield from checkpoint("middle")
        return "done"

    shorter.__qualname__ = two_tools.__qualname__  # the same program, edited
    with pytest.raises(Divergence) as caught:
        replay(first.run_id, db=db, program=shorter)
    text = str(caught.value)
    assert "nearest checkpoint before it: 'middle' at address 3" in text
    assert "an unknown place" not in text and "no checkpoint before it" not in text
    assert "the tool effect recorded here is no longer asked for" in text and '"path":"b"' in text


# -- 12. a dry run calls no model ----------------------------------------------------------------


def asks_a_model() -> Op[str]:
    reply = yield from infer("Say something long.", max_tokens=300)
    second = yield from infer("And again.")
    return reply.text + second.text


def test_a_dry_run_never_calls_a_real_model() -> None:
    with ScriptedServer([openai("real answer")]) as srv:
        plan = dry_run(asks_a_model, model=f"openai-compatible:gpt-4.1-mini@{srv.url}/v1")
        assert srv.requests == []
    from interpreters.models._remote import DEFAULT_MAX_TOKENS

    # each call at the cap the live call would send: its own, else the model's
    assert plan.usage.output_tokens == 300 + DEFAULT_MAX_TOKENS
    # priced as the live calls would be: a server on this machine is not OpenAI's API
    assert plan.usage.cost_usd is None and "cost unknown" in plan.render()
    api = dry_run(asks_a_model, model="openai:gpt-4.1-mini")  # never sent either
    assert api.usage.cost_usd is not None and api.usage.cost_usd > 0  # the API's price
    assert "scripted" not in plan.render() and "not sent to gpt-4.1-mini" in plan.render()
    scripted = dry_run(asks_a_model, model=ScriptedModel(["a", "b"]))
    assert scripted.value == "ab"


# -- 13. a usd budget fails closed ------------------------------------------------------------------


def spends() -> Op[Any]:
    async_calls = []
    for _ in range(3):
        reply = yield from infer("hi")
        async_calls.append(reply.text)
    return async_calls


def test_a_usd_budget_refuses_a_model_without_a_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def program() -> Op[Any]:
        return (yield from limit(Budget(usd=0.05), spends()))

    with ScriptedServer([openai("x")] * 3) as srv:
        result = run(
            program, model=f"openai-compatible:no-such-model@{srv.url}/v1", db=MemoryJournal()
        )
        assert srv.requests == []  # stopped before the call
    ex = result.value.failure()
    assert (
        ex.exceeded == "usd"
        and "no-such-model" in (ex.reason or "")
        and "OPDSL_PRICES" in (ex.reason or "")
    )
    # doing what the reason says: the price file it shows, with numbers filled in
    shown = (ex.reason or "").split("OPDSL_PRICES: ", 1)[1]
    prices = tmp_path / "prices.json"
    prices.write_text(shown.replace("USD_PER_M", "1.0"))
    monkeypatch.setenv("OPDSL_PRICES", str(prices))
    with ScriptedServer([openai("x")] * 3) as srv:
        model = f"openai-compatible:no-such-model@{srv.url}/v1"
        priced = run(program, model=model, db=MemoryJournal())
        assert len(srv.requests) == 3
    assert priced.value.unwrap() == ["x", "x", "x"]


# -- 14. resume after a deadline agrees with replay ------------------------------------------------


def test_a_resume_after_the_deadline_agrees_with_replay(tmp_path: Path) -> None:
    db = str(tmp_path / "runs.db")
    marker = str(tmp_path / "crashed")
    with pytest.raises(KeyboardInterrupt):
        run(
            progs.timed_steps,
            marker,
            tools=[progs.step],
            db=db,
            tool_refs=["tests.fixtures.new_user_programs:step"],
        )
    run_id = SqliteJournal(db).runs()[0].run_id
    later = VirtualClock(start=time.time() + 60)  # resumed a minute later: the deadline passed
    resumed = resume(run_id, db=db, clock=later)
    ex = resumed.value.failure()
    assert ex.exceeded == "seconds" and ex.spent.tool_calls == 1
    assert replay(run_id, db=db).value == resumed.value


# -- 15. a timeout stops a sync tool at its deadline -----------------------------------------------


def test_a_timeout_returns_at_its_deadline_around_a_blocking_tool() -> None:
    t0 = time.monotonic()
    result = run(progs.slow_under_timeout, tools=[progs.slow], db=MemoryJournal())
    took = time.monotonic() - t0
    cut = result.value.failure()
    assert isinstance(cut, TimedOut) and cut.seconds == 0.5, cut
    # the tool ran in a worker thread, and the error says its work may still land
    assert len(cut.cut) == 1 and "thread" in cut.cut[0], cut.cut
    assert took < 2.5, took


# -- 16, 17. cassettes ---------------------------------------------------------------------------


def test_cassettes_replay_the_tests_arguments_and_record_again(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "test_plan.py").write_text(
        "import os\n"
        "from op import Op, infer\n"
        "from interpreters import ScriptedModel\n\n"
        "def plan(goal: str) -> Op[str]:\n"
        "    reply = yield from infer(f'Plan: {goal}')\n"
        "    return reply.text\n\n"
        "def test_plan(opdsl_cassette):\n"
        "    goal = os.environ.get('GOAL', 'ship it')\n"
        "    result = opdsl_cassette.run(plan, goal, model=ScriptedModel([os.environ.get('ANSWER', 'one')]))\n"
        "    assert result.value == os.environ.get('ANSWER', 'one')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def pytest_(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )

    recorded = pytest_("--opdsl-record")
    assert recorded.returncode == 0, recorded.stdout
    cassette = tmp_path / "cassettes" / "test_plan.jsonl"
    assert cassette.exists() and f"wrote {cassette}" in recorded.stdout
    assert pytest_().returncode == 0
    changed = pytest_(GOAL="delete prod")
    assert (
        changed.returncode == 1 and "diverged" in changed.stdout and "delete prod" in changed.stdout
    )
    again = pytest_("--opdsl-record", ANSWER="two")
    assert again.returncode == 0 and f"wrote {cassette}" in again.stdout
    assert '"two"' in cassette.read_text() or "two" in cassette.read_text()
    assert pytest_(ANSWER="two").returncode == 0


# -- 18. the scripted interpreter's time is the virtual clock --------------------------------------


def test_scripted_sleep_runs_on_the_virtual_clock() -> None:
    def program() -> Op[Any]:
        return (yield from timeout(3600, sleep(7200)))

    assert ScriptedInterpreter([]).run(program).value.failure() == TimedOut(seconds=3600)
    # a script may still expect the sleep; the clock still runs it
    assert ScriptedInterpreter([(expect("sleep"), None)]).run(program).value.failure() == TimedOut(
        seconds=3600
    )


def test_openai_compatible_never_sends_openais_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-key-not-for-you")
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)

    def hello() -> Op[str]:
        return (yield from infer("hi")).text

    with ScriptedServer([openai("one"), openai("two")]) as srv:
        spec = f"openai-compatible:local@{srv.url}/v1"
        assert run(hello, model=spec, db=MemoryJournal()).value == "one"
        assert "authorization" not in srv.headers[0]
        monkeypatch.setenv("OPENAI_COMPATIBLE_API_KEY", "local-key")
        assert run(hello, model=spec, db=MemoryJournal()).value == "two"
        assert srv.headers[1]["authorization"] == "Bearer local-key"
    with ScriptedServer([status(400, "bad")]) as srv:
        failed = run(hello, model=f"openai-compatible:local@{srv.url}/v1", db=MemoryJournal())
        assert "openai-compatible" in str(failed.error)


# -- Ctrl-C ------------------------------------------------------------------------------------


def test_ctrl_c_stops_at_the_next_effect_and_names_the_run(tmp_path: Path) -> None:
    import signal

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    db = str(tmp_path / "runs.db")
    marker = str(tmp_path / "m")
    argv = [
        sys.executable,
        "-m",
        "interpreters",
        "run",
        "tests.fixtures.new_user_programs:two_blocking_steps",
        "--arg",
        f"marker={marker}",
        "--tools",
        "tests.fixtures.new_user_programs:blocking_step",
        "--db",
        db,
    ]
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not Path(f"{marker}.1").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # while the sync tool blocks
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    run_id = SqliteJournal(db).runs()[0].run_id
    said = err.strip().splitlines()[-1]
    assert said == f"opdsl: stopped; continue with: opdsl resume {run_id} --db {db}"
    assert "Traceback" not in err
    command = said.split("continue with: ", 1)[1]  # run as printed, with the installed command
    done = subprocess.run(
        ["bash", "-c", command],
        env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("step 2 done")
