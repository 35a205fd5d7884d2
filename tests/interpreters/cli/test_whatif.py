"""``opdsl whatif`` and ``opdsl cost`` over an OpenAI-compatible server on loopback: a run forked
at a checkpoint with another model, run for real and shown beside the original (where they
part, how each ended, tokens and cost); priced without a call (``--dry-run``, ``cost``); the
original never changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interpreters import SqliteJournal, run
from interpreters.cli._main import main
from tests.servers import ScriptedServer, openai

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """from op import Op, checkpoint, infer


def essay(topic: str) -> Op[str]:
    yield from checkpoint("start")
    outline = yield from infer(f"Outline {topic}")
    yield from checkpoint("outlined")
    text = yield from infer(f"Write about {topic}: {outline.text}")
    return text.text
"""

PRICES = {"small": {"input": 1.0, "output": 2.0}, "big": {"input": 10.0, "output": 30.0}}


@pytest.fixture
def writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "writing.py").write_text(PROGRAM)
    (tmp_path / "prices.json").write_text(json.dumps(PRICES))
    monkeypatch.setenv("OPDSL_PRICES", str(tmp_path / "prices.json"))
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("writing", None)


def _opdsl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_whatif_forks_with_the_other_model_and_shows_both(
    writing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import writing as module  # type: ignore[import-not-found]

    with ScriptedServer() as server:
        server.add(
            openai("1. intro 2. end", usage=(1000, 100, 0), model="small"),
            openai("A short essay.", usage=(2000, 500, 0), model="small"),
        )
        small, big = (
            f"openai-compatible:small@{server.url}/v1",
            f"openai-compatible:big@{server.url}/v1",
        )
        original = run(module.essay, "tides", model=small, db="runs.db")
        assert original.value == "A short essay."
        before = [
            (e.address, e.status, e.result_json)
            for e in SqliteJournal("runs.db").entries(original.run_id)
        ]

        # priced at the big model's price, nothing called
        code, out, _ = _opdsl(capsys, "cost", "--model", big, original.run_id, "--db", "runs.db")
        assert code == 0, out
        assert "2 call(s), 3000 input + 600 output tokens: recorded $0.0042 (small)" in out
        assert f"as {big}: $0.0480" in out and "tokenizer" in out
        code, out, _ = _opdsl(
            capsys,
            "whatif",
            original.run_id,
            "--from",
            "outlined",
            "--model",
            big,
            "--dry-run",
            "--db",
            "runs.db",
        )
        assert code == 0 and "1 call(s), 2000 input + 500 output tokens, $0.0030" in out, out
        assert f"as {big}: $0.0350" in out
        assert len(server.requests) == 2, "a dry run calls no model"

        # for real, in a process of its own: the fork asks the big model after "outlined"
        server.add(openai("A long and careful essay.", usage=(2100, 900, 0), model="big"))
        env = {**os.environ, "PYTHONPATH": f"{writing}{os.pathsep}{ROOT}"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "interpreters",
                "whatif",
                original.run_id,
                "--from",
                "outlined",
                "--model",
                big,
                "--db",
                "runs.db",
            ],
            capture_output=True,
            text=True,
            cwd=writing,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"what if run {original.run_id} had used {big} after checkpoint 'outlined'" in out
    assert "they part at address 4: the same effect, a different result" in out, out
    assert '-  "model": "small",' in out and '+  "model": "big",' in out
    assert (
        '-  "text": "A short essay.",' in out and '+  "text": "A long and careful essay.",' in out
    )
    assert "ended:  completed -> completed" in out
    assert f"{original.run_id}: 1 call(s), 2000 input + 500 output tokens, $0.0030" in out
    assert "1 call(s), 2100 input + 900 output tokens, $0.0480" in out
    assert server.requests[-1]["model"] == "big"
    journal = SqliteJournal("runs.db")
    fork = next(r for r in journal.runs() if r.run_id != original.run_id)
    assert fork.parent_run == original.run_id and fork.fork_checkpoint == "outlined"
    assert [
        (e.address, e.status, e.result_json) for e in journal.entries(original.run_id)
    ] == before


def test_bad_input_is_one_line(writing: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import writing as module  # pyright: ignore[reportMissingImports]

    with ScriptedServer([openai("o", model="small"), openai("e", model="small")]) as server:
        done = run(
            module.essay, "x", model=f"openai-compatible:small@{server.url}/v1", db="runs.db"
        )
    code, _, err = _opdsl(
        capsys,
        "whatif",
        done.run_id,
        "--from",
        "nope",
        "--model",
        "openai:gpt-4.1-mini",
        "--db",
        "runs.db",
    )
    assert code == 2 and "checkpoint 'nope' not found" in err and err.count("\n") == 1
    code, _, err = _opdsl(capsys, "cost", "--model", "nonsense", done.run_id, "--db", "runs.db")
    assert code == 2 and err.count("\n") == 1
    # a model spec no model is made of (a script that is not there) is said before any fork
    missing = "scripted:no-such-script.json"
    code, _, err = _opdsl(capsys, "whatif", done.run_id, "--model", missing, "--db", "runs.db")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("opdsl: error: model spec 'scripted:no-such-script.json': cannot read")
    assert len(SqliteJournal("runs.db").runs()) == 1  # nothing forked


def _two_essays(server: ScriptedServer, essay: Any, model: str) -> list[str]:
    """Two finished runs of the writing program on ``model`` ("Kept." and "Short."): their ids."""
    ids = []
    for text in ("Kept.", "Short."):
        server.add(openai("outline", usage=(100, 10, 0), model="small"))
        server.add(openai(text, usage=(1000, 100, 0), model="small"))
        ids.append(run(essay, "x", model=model, db="runs.db").run_id)
    return ids


def test_whatif_over_several_runs_sums_them_up(
    writing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import writing as module  # pyright: ignore[reportMissingImports]

    with ScriptedServer() as server:
        small = f"openai-compatible:small@{server.url}/v1"
        big = f"openai-compatible:big@{server.url}/v1"
        ids = _two_essays(server, module.essay, small)
        server.add(openai("Kept.", usage=(1000, 100, 0), model="big"))
        server.add(openai("Longer.", usage=(1000, 200, 0), model="big"))
        code, out, err = _opdsl(
            capsys, "whatif", *ids, "--from", "outlined", "--model", big, "--db", "runs.db"
        )
        assert code == 0, out + err
        lines = out.splitlines()
        assert (
            lines[0].startswith(f"{ids[0]}  run ")
            and "ended the same (completed); $0.0012 -> $0.0130" in lines[0]
        )
        assert (
            "ended otherwise (completed -> completed, parting at 4); $0.0012 -> $0.0160" in lines[1]
        )
        assert lines[2] == (
            f"2 runs with {big}: 1 ended the same; first parting at: 4 (2); cost after the "
            f"checkpoint: $0.0024 as recorded, $0.0290 with {big}"
        )
        asked = len(server.requests)
        code, out, _ = _opdsl(
            capsys,
            "whatif",
            *ids,
            "--from",
            "outlined",
            "--model",
            big,
            "--dry-run",
            "--db",
            "runs.db",
        )
        assert code == 0 and len(server.requests) == asked
        assert (
            "(dry run, nothing called): first parting at: nowhere; cost after the checkpoint: $0.0024 as recorded, $0.0260 with"
            in out
        )


def test_whatif_with_a_prompt_file_sends_its_text_as_the_system_prompt(
    writing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import writing as module  # pyright: ignore[reportMissingImports]

    (writing / "terse.txt").write_text("Answer in one line.")
    with ScriptedServer() as server:
        server.add(openai("outline", model="small"), openai("A short essay.", model="small"))
        small = f"openai-compatible:small@{server.url}/v1"
        big = f"openai-compatible:big@{server.url}/v1"
        done = run(module.essay, "tides", model=small, db="runs.db")
        asked = len(server.requests)

        # a file that cannot be read: one line naming it, and nothing forked or asked
        code, _, err = _opdsl(
            capsys,
            "whatif",
            done.run_id,
            "--model",
            big,
            "--prompt-file",
            "missing.txt",
            "--db",
            "runs.db",
        )
        assert code == 2 and "--prompt-file missing.txt" in err and err.count("\n") == 1, err
        assert len(SqliteJournal("runs.db").runs()) == 1 and len(server.requests) == asked

        server.add(openai("One line.", model="big"))
        code, out, err = _opdsl(
            capsys,
            "whatif",
            done.run_id,
            "--from",
            "outlined",
            "--model",
            big,
            "--prompt-file",
            "terse.txt",
            "--db",
            "runs.db",
        )
    assert code == 0, out + err
    assert f"had used {big} and the system prompt of terse.txt after checkpoint 'outlined'" in out
    sent = server.requests[-1]
    assert sent["model"] == "big"
    # the program wrote no system message: the file's text goes first, the program's after it
    assert sent["messages"][0] == {"role": "system", "content": "Answer in one line."}
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["messages"][1]["content"].startswith("Write about tides: outline")
    # the calls the fork replays before its checkpoint are not asked again
    assert len(server.requests) == asked + 1


def test_whatif_over_every_finished_run_of_a_program(
    writing: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import writing as module  # pyright: ignore[reportMissingImports]

    code, _, err = _opdsl(capsys, "whatif", "--model", "openai:gpt-4.1-mini", "--db", "runs.db")
    assert code == 2 and "--program" in err and err.count("\n") == 1, err
    with ScriptedServer() as server:
        small = f"openai-compatible:small@{server.url}/v1"
        big = f"openai-compatible:big@{server.url}/v1"
        ids = _two_essays(server, module.essay, small)
        code, _, err = _opdsl(
            capsys, "whatif", "--program", "writing:other", "--model", big, "--db", "runs.db"
        )
        assert code == 1 and "no finished run of writing:other" in err, err

        server.add(openai("Kept.", usage=(1000, 100, 0), model="big"))
        server.add(openai("Longer.", usage=(1000, 200, 0), model="big"))
        argv = ["whatif", "--program", "writing:essay", "--from", "outlined", "--model", big]
        code, out, err = _opdsl(capsys, *argv, "--db", "runs.db")
        assert code == 0, out + err
        lines = out.splitlines()
        assert lines[0].startswith(f"{ids[0]}  run ") and "ended the same" in lines[0]
        assert lines[1].startswith(f"{ids[1]}  run ") and "ended otherwise" in lines[1]
        assert lines[2].startswith(f"2 runs with {big}: 1 ended the same;"), out

        # the forks just made are runs of the program too, but not originals: left out
        asked = len(server.requests)
        code, out, _ = _opdsl(capsys, *argv, "--dry-run", "--db", "runs.db")
        assert code == 0 and len(server.requests) == asked
        assert [line.split()[0] for line in out.splitlines()[:2]] == ids
        assert f"2 runs with {big} (dry run, nothing called)" in out
