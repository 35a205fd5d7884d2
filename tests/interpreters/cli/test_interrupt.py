"""Ctrl-C (SIGINT) at any moment of an ``opdsl`` process is one line and status 130, never a
traceback: during start-up (while the command's modules load), while a run stops after a
first Ctrl-C, and while the process ends. Real processes, signalled at moments they show
(a library mapped in their memory, a file a tool wrote, a line they printed), a few times each."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = "tests.fixtures.interrupt_programs:two_pauses"
TOOL = "tests.fixtures.interrupt_programs:pause"

pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc")


def _start(tmp: Path, name: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    marker = str(tmp / name)
    argv = [sys.executable, "-m", "interpreters", "run", PROGRAM, "--arg", f"marker={marker}"]
    argv += ["--tools", TOOL, "--db", str(tmp / f"{name}.db"), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, marker


def _until(what: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not what():
        assert proc.poll() is None, "the process ended before the moment came"
        assert time.monotonic() < deadline, "the moment never came"
        time.sleep(0.0005)


def _mapped(proc: subprocess.Popen[str], library: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return library in Path(f"/proc/{proc.pid}/maps").read_text()
        except OSError:
            return False

    return check


def _pause(seconds: float) -> None:
    if seconds:
        time.sleep(seconds)


def _said_one_line(proc: subprocess.Popen[str] | subprocess.CompletedProcess[str], err: str) -> str:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 130, (proc.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opdsl: stopped"), err
    return lines[0]


def _all(tries: list[Callable[[], None]]) -> None:
    """Run the tries at once (each is its own process); the first failure is raised."""
    failures: list[BaseException] = []

    def go(t: Callable[[], None]) -> None:
        try:
            t()
        except BaseException as exc:  # raised in the test's thread below
            failures.append(exc)

    threads = [threading.Thread(target=go, args=(t,)) for t in tries]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        raise failures[0]


def test_ctrl_c_while_the_command_loads_is_one_line_and_status_130(tmp_path: Path) -> None:
    def during_start_up(library: str, after: float, n: int) -> Callable[[], None]:
        def go() -> None:
            for attempt in range(5):
                name = f"s{n}-{attempt}"
                proc, marker = _start(tmp_path, name, "--quiet")
                _until(_mapped(proc, library), proc)  # its modules are loading
                _pause(after)
                if Path(f"{marker}.1").exists():  # a loaded machine let the moment pass
                    proc.kill()
                    proc.communicate()
                    continue
                proc.send_signal(signal.SIGINT)
                _, err = proc.communicate(timeout=60)
                line = _said_one_line(proc, err)
                db = tmp_path / f"{name}.db"
                assert line in (
                    "opdsl: stopped; no run was left to continue",
                    f"opdsl: stopped; continue with: opdsl resume {_run_of(db)} --db {db}",
                ), line
                return
            raise AssertionError(f"the program always began before {after} s after {library}")

        return go

    moments = [("_pydantic_core", 0.0), ("_pydantic_core", 0.01), ("_pydantic_core", 0.03)]
    moments += [("_asyncio", 0.0), ("_asyncio", 0.02)]
    _all([during_start_up(lib, after, n) for n, (lib, after) in enumerate(moments)])


def _run_of(db: Path) -> str:
    from interpreters import SqliteJournal

    runs = SqliteJournal(db).runs()
    return runs[0].run_id if runs else "(none)"


def test_ctrl_c_again_while_the_run_stops_or_the_process_ends_is_still_one_line(
    tmp_path: Path,
) -> None:
    def after_a_cancel(n: int, when: str, after: float) -> Callable[[], None]:
        def go() -> None:
            proc, marker = _start(tmp_path, f"c{n}")
            _until(lambda: Path(f"{marker}.1").exists(), proc)
            proc.send_signal(signal.SIGINT)  # the run stops after this tool call
            assert proc.stderr is not None
            if when == "stopping":  # the tool returned: the run is stopping
                _until(lambda: Path(f"{marker}.1.done").exists(), proc)
                _pause(after)
                proc.send_signal(signal.SIGINT)
                err = ""
            else:  # it said what it left: the process is ending
                err = proc.stderr.readline()
                _pause(after)
                proc.send_signal(signal.SIGINT)
            err += proc.stderr.read()
            proc.wait(60)
            line = _said_one_line(proc, err)
            db = tmp_path / f"c{n}.db"
            assert line == f"opdsl: stopped; continue with: opdsl resume {_run_of(db)} --db {db}"

        return go

    tries = [("stopping", 0.0), ("stopping", 0.01), ("stopping", 0.03)]
    tries += [("ending", 0.0), ("ending", 0.005), ("ending", 0.02)]
    _all([after_a_cancel(n, when, after) for n, (when, after) in enumerate(tries)])


def test_ctrl_c_as_a_finished_run_ends_its_process_is_one_line_at_most(tmp_path: Path) -> None:
    def at_the_end(n: int, after: float) -> Callable[[], None]:
        def go() -> None:
            proc, _ = _start(tmp_path, f"e{n}", "--quiet")
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline().strip() == "step 1 done, step 2 done"
            _pause(after)
            proc.send_signal(signal.SIGINT)
            err = proc.stderr.read()
            proc.wait(60)
            assert "Traceback" not in err and "Exception ignored" not in err, err
            run_id = _run_of(tmp_path / f"e{n}.db")
            lines = err.strip().splitlines()
            done = f"run {run_id} completed; see `opdsl show {run_id}`"
            if proc.returncode == 130:  # the Ctrl-C came before the process had ended
                assert lines in (
                    ["opdsl: stopped; no run was left to continue"],  # before it said so
                    # after it said so, while the command still handled its own Ctrl-C
                    [done, "opdsl: stopped; no run was left to continue"],
                    [done, "opdsl: stopped"],  # as it tore down
                ), err
            else:
                assert (proc.returncode, lines) == (0, [done]), (proc.returncode, err)

        return go

    _all([at_the_end(n, after) for n, after in enumerate([0.0, 0.002, 0.01])])


@pytest.mark.parametrize("where", ["begin", "end_at_once_on_interrupt"])
def test_a_ctrl_c_in_the_moment_between_the_commands_own_handling_and_the_end_is_one_line(
    tmp_path: Path, where: str
) -> None:
    """The moments too short to hit with a signal from outside (CI hit the second once): as
    the command begins, before it catches a Ctrl-C itself, and as it hands over to the handler
    that ends the process, after it has stopped catching one. A KeyboardInterrupt raised
    right there, as Python raises a Ctrl-C's, is one line and status 130."""
    marker = tmp_path / "m"
    script = (
        "import sys\n"
        "from interpreters.cli import _main, main\n"
        "def landed(*a, **k):\n"
        "    raise KeyboardInterrupt  # as a Ctrl-C that lands here is raised\n"
        f"_main.{where} = landed\n"
        f"sys.argv = ['opdsl', 'run', {PROGRAM!r}, '--arg', 'marker={marker}', '--tools', "
        f"{TOOL!r}, '--db', {str(tmp_path / 'r.db')!r}, '--quiet']\n"
        "sys.exit(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    if where == "begin":  # nothing ran
        assert lines == ["opdsl: stopped"] and not marker.with_suffix(".1").exists()
    else:  # the run had completed and said so
        run_id = _run_of(tmp_path / "r.db")
        assert lines == [f"run {run_id} completed; see `opdsl show {run_id}`", "opdsl: stopped"]
        assert proc.stdout.strip() == "step 1 done, step 2 done"


class _CtrlCAfterWrite(io.StringIO):
    """A stream a Ctrl-C lands on right after its first write, as a signal would."""

    def write(self, text: str) -> int:
        super().write(text)
        raise KeyboardInterrupt


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_ctrl_c_as_the_result_is_said_leaves_no_line_without_its_end(
    stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value (stdout) and the line that says the run completed (stderr) each reach their
    stream in one write: the line that says what the Ctrl-C left starts a line of its own. A
    full run once printed 'run ... completed; see `opdsl show ...`opdsl: stopped; ...'."""
    from interpreters import MemoryJournal, run
    from interpreters.cli._output import report_result
    from op import Op, emit

    def answer() -> Op[str]:
        yield from emit("answering")
        return "forty-two"

    result = run(answer, db=MemoryJournal())
    caught = _CtrlCAfterWrite()
    monkeypatch.setattr(sys, "stdout", caught if stream == "stdout" else io.StringIO())
    monkeypatch.setattr(sys, "stderr", caught if stream == "stderr" else io.StringIO())
    with pytest.raises(KeyboardInterrupt):
        report_result(result)
    said = caught.getvalue()
    assert said.endswith("\n") and said.count("\n") == 1, repr(said)


REDELIVERED = """
import signal, sys, types
from interpreters.cli._interrupt import redelivering
signal.signal(signal.SIGINT, signal.default_int_handler)
hook = redelivering(sys.__unraisablehook__)
hook(types.SimpleNamespace(exc_value=KeyboardInterrupt()))
print("the Ctrl-C was lost")
"""


def test_a_ctrl_c_redelivered_while_pythons_own_handler_is_set_stops_in_one_line() -> None:
    """A Ctrl-C that landed where it could not be raised is delivered again; when Python's
    own handler is the one set at that moment, it raises inside the hook, where it would be
    lost again ("Exception ignored in sys.unraisablehook", a full run met it): the command
    stops in one line, status 130."""
    done = subprocess.run(
        [sys.executable, "-c", REDELIVERED], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr == "opdsl: stopped; no run was left to continue\n", done.stderr


@pytest.mark.parametrize("caught", ["schema", "chained"])
def test_a_ctrl_c_a_library_raised_as_another_error_while_the_program_loads_is_one_line(
    tmp_path: Path, caught: str
) -> None:
    """CI once hit a Ctrl-C while pydantic-core built a model's validator as the command's
    modules loaded: pydantic-core raised a SchemaError whose last line was the
    KeyboardInterrupt, and the command said it was a bug of opdsl's, with a traceback."""
    argv = [sys.executable, "-m", "interpreters", "run"]
    argv += ["tests.fixtures.interrupt_at_import:program", "--db", str(tmp_path / "r.db")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPDSL_TEST_CAUGHT": caught}
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    line = _said_one_line(proc, proc.stderr)
    assert line == "opdsl: stopped; no run was left to continue"


def test_only_an_error_that_carries_a_ctrl_c_is_taken_for_one() -> None:
    from pydantic_core import SchemaError, SchemaValidator, core_schema

    from interpreters.cli._interrupt import reports_interrupt

    class Landed:
        def __repr__(self) -> str:
            raise KeyboardInterrupt

    with pytest.raises(SchemaError) as raw:  # as opdsl's own modules meet it (status 70 before)
        SchemaValidator(core_schema.literal_schema([Landed()]))
    assert reports_interrupt(raw.value)
    with pytest.raises(SchemaError) as wrong:  # a schema that is wrong is no Ctrl-C
        SchemaValidator(core_schema.literal_schema([]))
    assert not reports_interrupt(wrong.value)
    said = RuntimeError("the text names KeyboardInterrupt, nothing raised it")
    assert not reports_interrupt(said)
    looped = ValueError("a cycle")
    looped.__cause__ = RuntimeError("back")
    looped.__cause__.__cause__ = looped
    assert not reports_interrupt(looped)
    # raised from one, through a program's "cannot import" error: a Ctrl-C
    hook = RuntimeError("Error calling __set_name__")
    hook.__cause__ = KeyboardInterrupt()
    wrapped = ValueError("cannot import program")
    wrapped.__cause__ = hook
    assert reports_interrupt(wrapped)
    # a bug (or a full disk) in a run's cleanup as a Ctrl-C stops it is said as itself
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise TypeError("a bug while the run stops") from None
    except TypeError as bug:
        assert bug.__context__ is not None
        assert not reports_interrupt(bug)


@pytest.mark.parametrize(
    "landed",
    [
        "exec('raise KeyboardInterrupt')",  # in a string exec (a dataclass being made)
        "type('C', (), {'x': Named()})",  # in __set_name__ (3.11 raises a RuntimeError)
    ],
)
def test_a_ctrl_c_as_the_commands_own_module_loads_is_one_line_and_status_130(
    tmp_path: Path, landed: str
) -> None:
    """CI hit both: a Ctrl-C in a string ``exec`` as the command's module loaded ended the
    process by signal (status -2) after the right line, and one in a ``__set_name__`` (in
    pydantic's own import) was raised as a RuntimeError with a traceback."""
    script = (
        "import sys\n"
        "class Named:\n"
        "    def __set_name__(self, owner, name):\n"
        "        raise KeyboardInterrupt\n"
        "class Landed:  # the command's module meets a Ctrl-C as it loads\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'interpreters.cli._main':\n"
        "            sys.meta_path.remove(self)\n"
        f"            {landed}\n"
        "sys.meta_path.insert(0, Landed())\n"
        "sys.argv = ['opdsl', '--version']\n"
        "from interpreters.cli import main\n"
        "sys.exit(main())\n"
    )
    (tmp_path / "landing.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    proc = subprocess.run(  # run as ``-m``, as ``python -m interpreters`` is (``-c`` exits early)
        [sys.executable, "-m", "landing"], env=env, capture_output=True, text=True, timeout=60
    )
    assert _said_one_line(proc, proc.stderr) == "opdsl: stopped; no run was left to continue"
