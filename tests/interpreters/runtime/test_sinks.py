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
