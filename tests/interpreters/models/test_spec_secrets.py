"""A model spec's URL may carry credentials (``http://user:password@host/v1``): they reach the
server, and nothing else. The spec is written down and shown (the journal's run config,
errors, ``show``, ``export``, the report) with them redacted, and a wrong spec is one line
that names it, through the ``opdsl`` command as a user types it."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interpreters import open_journal, resolve_model
from interpreters.models import model_identity, redact_spec
from tests.servers import ScriptedServer, openai, status

OPDSL = str(Path(sys.executable).with_name("opdsl"))
SECRET = "hunter2-sekrit"  # the password the tests must never find written

PROGRAM = """\
from op import Op, ask, infer


def write(topic: str) -> Op[str]:
    who = yield from ask(f"who is {topic} for?")
    reply = yield from infer(f"write about {topic} for {who}")
    return reply.text
"""


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        (
            f"openai-compatible:m@http://me:{SECRET}@127.0.0.1:9/v1",
            "openai-compatible:m@http://[redacted]@127.0.0.1:9/v1",
        ),
        (
            f"openai-compatible:m@https://{SECRET}@gpu-box/v1?max_tokens=5",
            "openai-compatible:m@https://[redacted]@gpu-box/v1?max_tokens=5",
        ),
        (
            f"openai-compatible:a@b@http://me:p@{SECRET}@h:1/v1",
            "openai-compatible:a@b@http://[redacted]@h:1/v1",
        ),
        ("openai-compatible:m@http://127.0.0.1:9/v1", "openai-compatible:m@http://127.0.0.1:9/v1"),
        ("ollama:qwen3:8b", "ollama:qwen3:8b"),
    ],
)
def test_redact_spec_takes_out_any_urls_credentials(spec: str, shown: str) -> None:
    assert redact_spec(spec) == shown
    assert SECRET not in str(model_identity(resolve_model(spec)))


def test_wrong_specs_are_one_line_that_names_the_spec_without_its_password() -> None:
    for spec, expected in [
        (f"openai-compatible:m@http://u:{SECRET}@[::1/v1", "its URL is not a URL"),
        (f"openai-compatible:@http://u:{SECRET}@h/v1", "should look like openai-compatible:MODEL"),
        (f"openai-compatible:m@http://u:{SECRET}@h/v1?colour=red", "not an option"),
        (f"nope:m@http://u:{SECRET}@h/v1", "unknown model provider 'nope'"),
    ]:
        with pytest.raises(ValueError) as caught:
            resolve_model(spec)
        message = str(caught.value)
        assert expected in message and "[redacted]" in message, message
        assert SECRET not in message and "\n" not in message


def test_a_base_url_from_the_environment_that_is_not_a_url_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", f"http://u:{SECRET}@[::1:11434")
    with pytest.raises(ValueError) as caught:
        resolve_model("ollama:qwen3:8b")
    message = str(caught.value)
    assert message.startswith("ollama: the base URL 'http://[redacted]@[::1:11434' is not a URL")
    assert SECRET not in message


def test_a_model_object_names_its_spec_without_the_password() -> None:
    model = resolve_model(f"openai-compatible:m@http://me:{SECRET}@127.0.0.1:9/v1")
    assert SECRET not in getattr(model, "spec", "") and SECRET not in repr(model)


def _opdsl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPDSL_", "OTEL_")) or k == "OPDSL_SEAL_KEY"
    }
    return subprocess.run(
        [OPDSL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_password_reaches_the_server_and_is_never_written_or_shown(tmp_path: Path) -> None:
    (tmp_path / "writer.py").write_text(PROGRAM)
    with ScriptedServer([openai("done"), status(400, "the GPU is on fire")]) as srv:
        spec = f"openai-compatible:smol@http://me:{SECRET}@127.0.0.1:{srv.port}/v1?stream=false"
        for topic in ("x", "y"):
            waits = _opdsl(
                tmp_path, "run", "writer:write", "--arg", f"topic={topic}", "--model", spec
            )
            assert waits.returncode == 0 and "is waiting for an answer" in waits.stderr, waits
        first, second = (r.run_id for r in open_journal(tmp_path / ".opdsl" / "runs.db").runs())
        # the journal kept the spec without its password: an answer needs it given again
        again = _opdsl(tmp_path, "answer", first, "the team")
        assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again
        assert "without its URL's credentials; give the model again" in again.stderr
        assert "[redacted]" in again.stderr and SECRET not in again.stderr
        answered = _opdsl(tmp_path, "answer", first, "the team", "--model", spec)
        assert answered.returncode == 0 and "done" in answered.stdout, answered.stderr
        # the credentials went to the server, as Basic authorization (not in the URL)
        sent = srv.headers[0]["authorization"]
        assert base64.b64decode(sent.removeprefix("Basic ")).decode() == f"me:{SECRET}"
        failed = _opdsl(tmp_path, "answer", second, "the team", "--model", spec)
    assert failed.returncode != 0 and "the GPU is on fire" in failed.stderr, failed
    assert "[redacted]" in failed.stderr and SECRET not in failed.stdout + failed.stderr

    runs = open_journal(tmp_path / ".opdsl" / "runs.db", read_only=True).runs()
    assert sorted(r.status for r in runs) == ["completed", "failed"]
    for record in runs:
        assert json.loads(record.config_json)["model"] == redact_spec(spec)
    # the failed run's error names the model: every way of reading it shows it redacted
    for record in [r for r in runs if r.status == "failed"]:
        for done in (
            _opdsl(tmp_path, "show", record.run_id),
            _opdsl(tmp_path, "show", record.run_id, "--json"),
            _opdsl(tmp_path, "export", record.run_id),
            _opdsl(tmp_path, "report", record.run_id, "-o", str(tmp_path / "r.html")),
        ):
            assert done.returncode == 0, done.stderr
            assert SECRET not in done.stdout + done.stderr
        assert SECRET not in (tmp_path / "r.html").read_text()
    # nowhere in the journal's files, whatever table or log would hold it
    for f in (tmp_path / ".opdsl").iterdir():
        assert SECRET.encode() not in f.read_bytes(), f


def test_a_spec_whose_url_cannot_be_parsed_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "writer.py").write_text(PROGRAM)
    ran = _opdsl(
        tmp_path,
        "run",
        "writer:write",
        "--arg",
        "topic=x",
        "--model",
        "openai-compatible:m@http://[::1/v1",
    )
    assert ran.returncode == 2, ran
    assert ran.stderr.strip() == (
        "opdsl: error: model spec 'openai-compatible:m@http://[::1/v1': its URL is not a URL "
        "(Invalid port: ':1')"
    ), ran.stderr


def test_a_base_url_in_the_environment_that_is_not_utf8_is_one_line_naming_it(
    tmp_path: Path,
) -> None:
    """``OPENAI_BASE_URL`` holding a byte that is not UTF-8 (Python reads it as a lone
    surrogate): one line that says so, its password redacted, not an encoder's error."""
    (tmp_path / "writer.py").write_text(PROGRAM)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPDSL_", "OTEL_")) or k == "OPDSL_SEAL_KEY"
    }
    env["OPENAI_API_KEY"] = "sk-test"
    env_bytes = {k.encode(): v.encode() for k, v in env.items()}
    env_bytes[b"OPENAI_BASE_URL"] = b"http://me:" + SECRET.encode() + b"@127.0.0.1:9/v\xff1"
    ran = subprocess.run(
        [OPDSL, "run", "writer:write", "--arg", "topic=x", "--model", "openai:gpt-4.1-mini"],
        cwd=tmp_path,
        env=env_bytes,
        capture_output=True,
        timeout=120,
    )
    said = ran.stderr.decode("utf-8", "backslashreplace").strip()
    assert ran.returncode == 2 and len(said.splitlines()) == 1, said
    assert "the base URL 'http://[redacted]@127.0.0.1:9/v\\udcff1' is not text" in said, said
    assert "OPENAI_BASE_URL" in said and SECRET not in said
    assert not (tmp_path / ".opdsl" / "runs.db").exists()  # refused before any run began


def test_import_names_a_files_model_again_with_its_credentials_redacted(tmp_path: Path) -> None:
    """The hint ``opdsl import`` prints: what the file names, shell-quoted, and a model URL's
    password never shown (a file someone hands us may hold one)."""
    from interpreters import MemoryJournal, ScriptedModel, export_run, run
    from op import Op, infer

    def hello() -> Op[str]:
        return (yield from infer("hi")).text

    journal = MemoryJournal()
    done = run(hello, model=ScriptedModel(["yo"]), db=journal)
    lines = export_run(journal, done.run_id).splitlines()
    first = json.loads(lines[0])
    config = json.loads(first["run"]["config_json"])
    config["model"] = f"openai-compatible:m@http://me:{SECRET}@127.0.0.1:9/v1"
    config["workspace"] = "/tmp/a b; rm -rf ~"
    first["run"]["config_json"] = json.dumps(config)
    path = tmp_path / "handed.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    shown = subprocess.run(
        [OPDSL, "import", str(path), "--db", str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    assert shown.returncode == 0, shown.stderr
    assert SECRET not in shown.stdout + shown.stderr
    assert "[redacted]@127.0.0.1:9/v1" in shown.stdout
    assert "--workspace '/tmp/a b; rm -rf ~'" in shown.stdout
