"""Event sinks: JSONL lines are canonical JSON; the console view renders a run."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
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
    from op import Budget, Usage
    from op.events import EffectFinished, EffectStarted, RunFinished, RunStarted, TokenDelta

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


# -- run text is never markup, and a sink never fails a run -----------------------------------

MARKUP = "[/] [bold]b[/bold] [link=https://example.org]l[/link] [red] :smile: \x1b]0;t\x07 \x1b[2J"


def marked() -> Op[str]:
    yield from checkpoint(MARKUP)
    yield from tool("echo", {"text": MARKUP})
    failed = yield from tool("refuse", {"text": MARKUP})
    assert not failed.ok
    reply = yield from infer(MARKUP)
    yield from emit(MARKUP, {"data": MARKUP})
    return reply.text


def refuse(text: str) -> str:
    raise ValueError(text)


def _shown(text: str) -> str:
    """``MARKUP`` as the console shows it: as written, its control characters escaped."""
    return text.replace("\x1b", "\\x1b").replace("\x07", "\\x07")


@pytest.mark.parametrize("terminal", [False, True])
def test_run_text_with_markup_and_terminal_codes_is_shown_as_written(terminal: bool) -> None:
    out = io.StringIO()
    console = Console(file=out, width=400, force_terminal=terminal, color_system=None)
    model = ScriptedModel([MARKUP])
    result = run(marked, model=model, tools=[echo, refuse], on_event=ConsoleSink(console))
    assert result.status == "completed", result.error
    text = out.getvalue()
    shown = _shown(MARKUP)
    # (on a terminal, the live area's own cursor codes come between the lines)
    assert f"1 ◆ checkpoint {shown}\n" in text  # a checkpoint's name
    assert '2 tool echo {"text": "[/] [bold]b[/bold] [link=https://exampl…\n' in text
    assert f"3 tool failed tool failed: tool 'refuse' raised ValueError: {shown}\n" in text
    assert "4 infer [/] [bold]b[/bold] [link=https://example.org]l[/l…\n" in text
    assert f"{shown}\n" in text.split("4 infer", 1)[1]  # the model's answer, streamed
    assert f'5 • {shown} {{"data": "[/] [bold]b[/bold] [link=https://example.org]l[/l…' in text
    assert "\x1b]0;" not in text and "\x1b[2J" not in text  # no terminal code reaches it


def test_a_failed_run_whose_error_holds_markup_is_reported_as_failed_not_crashed() -> None:
    def fails() -> Op[None]:
        yield from checkpoint("start")
        raise RuntimeError(MARKUP)

    out = io.StringIO()
    result = run(fails, on_event=ConsoleSink(Console(file=out, width=400, color_system=None)))
    assert result.status == "failed" and MARKUP in str(result.error)
    assert f"■ failed: RuntimeError: {_shown(MARKUP)}" in out.getvalue()


def test_a_sink_that_fails_is_dropped_said_once_and_the_run_goes_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    seen: list[str] = []

    def broken(event: object) -> None:
        seen.append(type(event).__name__)
        raise ValueError("no \x1b[2J room")

    kept: list[str] = []
    result = run(
        program,
        model=ScriptedModel(["hi"]),
        tools=[echo],
        on_event=[broken, lambda e: kept.append(type(e).__name__)],
    )
    assert result.status == "completed" and result.value == "hi"
    assert seen == ["RunStarted"]  # dropped after its first failure
    assert kept[0] == "RunStarted" and kept[-1] == "RunFinished"  # the others get every event
    err = capfd.readouterr().err
    assert err.splitlines() == [
        "opdsl: the event sink test_a_sink_that_fails_is_dropped_said_once_and_the_run_goes_on"
        ".<locals>.broken failed (ValueError: no \\x1b[2J room); it gets no more events"
    ]
