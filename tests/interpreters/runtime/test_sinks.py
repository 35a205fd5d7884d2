"""Event sinks: JSONL lines are canonical JSON; the console view renders a run."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from interpreters import ConsoleSink, JsonlSink, ScriptedModel, run
from op import Op, Response, ToolCall, checkpoint, emit, infer, tool


def program() -> Op[str]:
    yield from checkpoint("start")
    yield from tool("echo", {"text": "x"})
    reply = yield from infer("hello")
    yield from emit("done", {"n": 1})
    return reply.text


def echo(text: str) -> str:
    return text


def test_jsonl_sink_writes_one_canonical_line_per_event(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with JsonlSink(path) as sink:
        run(program, model=ScriptedModel(["hi"]), tools=[echo], on_event=sink)
    lines = path.read_text().splitlines()
    types = [json.loads(line)["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("effect_started") == types.count("effect_finished") == 4
    assert "checkpoint_saved" in types and "emitted" in types and "token_delta" in types
    assert all(
        line
        == json.dumps(json.loads(line), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        for line in lines
    )


def test_console_sink_shows_progress() -> None:
    out = io.StringIO()
    sink = ConsoleSink(Console(file=out, width=100, color_system=None))
    model = ScriptedModel(
        [Response(tool_calls=(ToolCall(id="1", name="echo", arguments={}),)), "hi"]
    )
    run(program, model=model, tools=[echo], on_event=sink)
    text = out.getvalue()
    assert "▶ run" in text and "◆ checkpoint start" in text
    assert "tool echo" in text and "• done" in text and "■ completed" in text


# -- the live area: open scopes with their budget bars, spinners on what the run waits on ----


def _render(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=140, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_live_area_shows_open_scopes_against_their_budgets_and_what_the_run_waits_on() -> None:
    from op import (
        Budget,
        EffectFinished,
        EffectStarted,
        RunFinished,
        RunStarted,
        TokenDelta,
        Usage,
    )

    out = io.StringIO()
    sink = ConsoleSink(Console(file=out, width=140, color_system=None), live=False)
    sink(RunStarted(run_id="r", at=0.0, program="m:p"))
    budget = Budget(tokens=1_000, model_calls=4).model_dump()
    sink(EffectStarted(run_id="r", at=0.0, address="2", kind="limit", effect={"budget": budget}))
    sink(
        EffectStarted(
            run_id="r",
            at=0.0,
            address="2.1",
            kind="infer",
            effect={"messages": [{"role": "user", "content": "plan it"}]},
        )
    )
    sink(
        EffectFinished(
            run_id="r",
            at=1.0,
            address="2.1",
            kind="infer",
            status="completed",
            usage=Usage(input_tokens=300, output_tokens=100),
            duration_s=1.0,
        )
    )
    sink(
        EffectStarted(
            run_id="r",
            at=1.0,
            address="2.2",
            kind="tool",
            effect={"name": "run", "args": {"command": ["pytest"]}},
        )
    )
    area = _render(sink)
    assert "limit 2" in area and "tokens 400/1000" in area and "model 1/4" in area
    assert "tool 2.2" in area and "run" in area and "s " in area  # elapsed time on the spinner
    sink(EffectStarted(run_id="r", at=1.0, address="2.3", kind="infer", effect={"messages": []}))
    sink._live = object()  # type: ignore[assignment]  # as when the area is on screen
    sink(TokenDelta(run_id="r", at=1.0, address="2.3", text="half a sent"))
    assert "half a sent" in _render(sink)
    sink._live = None
    sink(
        EffectFinished(
            run_id="r", at=2.0, address="2.2", kind="tool", status="completed", duration_s=1.0
        )
    )
    sink(
        EffectFinished(
            run_id="r", at=2.0, address="2.3", kind="infer", status="completed", duration_s=1.0
        )
    )
    sink(
        EffectFinished(
            run_id="r", at=2.0, address="2", kind="limit", status="completed", duration_s=2.0
        )
    )
    assert _render(sink).strip() == ""  # nothing open, nothing shown
    assert "half a sent" in out.getvalue()  # the streamed text is printed whole when it ends
    sink(RunFinished(run_id="r", at=2.0, status="completed"))


def test_on_a_terminal_the_live_area_comes_and_goes_with_the_run() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system=None)
    sink = ConsoleSink(console)
    assert sink.live
    run(program, model=ScriptedModel(["hi"]), tools=[echo], on_event=sink)
    text = out.getvalue()
    assert "▶ run" in text and "■ completed" in text and "◆ checkpoint start" in text
    assert sink._live is None  # stopped at the end of the run
    piped = ConsoleSink(Console(file=io.StringIO()))
    assert not piped.live  # piped into another program: lines only
