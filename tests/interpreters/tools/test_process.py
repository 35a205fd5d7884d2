"""The one subprocess runner (tools/_process.py), through real processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from interpreters.tools._process import Finished, run_process


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def _run(argv: list[str], **kw: object) -> tuple[Finished, bytes]:
    out: list[bytes] = []
    stop = kw.pop("stop", None)

    def consume(chunk: bytes) -> bool:
        out.append(chunk)
        return stop is not None and stop in b"".join(out)  # type: ignore[operator]

    opts: dict[str, object] = {"timeout": 20.0, "idle_timeout": 20.0, "grace": 0.5}
    opts.update(kw)
    end = await run_process(argv, cwd=None, env=dict(os.environ), consume=consume, **opts)  # type: ignore[arg-type]
    return end, b"".join(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is not running; it waits for its parent to read its status
    stat = Path(f"/proc/{pid}/stat")
    if not stat.exists():
        return True
    raw = stat.read_bytes()  # the name, in parentheses, may hold any bytes
    return raw[raw.rfind(b")") + 2 :].split()[0] != b"Z"


def test_output_and_exit_status() -> None:
    end, out = anyio.run(_run, _py("import sys; print('hi'); sys.stderr.write('err'); sys.exit(3)"))
    assert end == Finished("exited", 3)
    assert out == b"hi\n"  # standard error is discarded unless merged


def test_standard_error_can_join_the_output() -> None:
    end, out = anyio.run(
        lambda: _run(_py("import sys; sys.stderr.write('err')"), merge_stderr=True)
    )
    assert (end.ending, out) == ("exited", b"err")


def test_standard_input_is_closed_so_a_reader_does_not_wait() -> None:
    t0 = time.monotonic()
    end, out = anyio.run(_run, _py("import sys; print(len(sys.stdin.read()))"))
    assert (end.ending, out) == ("exited", b"0\n")
    assert time.monotonic() - t0 < 10


def test_the_reader_can_stop_it_and_the_process_is_ended() -> None:
    end, out = anyio.run(
        lambda: _run(
            _py("import time; print('ready', flush=True); time.sleep(60)"),
            stop=b"ready",
            exit_wait=0.2,
        )
    )
    assert end.ending == "stopped"
    assert end.returncode is not None and end.returncode < 0  # ended by a signal
    assert out.startswith(b"ready")


def test_no_output_for_the_idle_timeout_ends_it() -> None:
    t0 = time.monotonic()
    end, _ = anyio.run(lambda: _run(_py("import time; time.sleep(60)"), idle_timeout=0.5))
    assert end.ending == "idle"
    assert end.returncode is not None and end.returncode < 0
    assert time.monotonic() - t0 < 10


def test_the_hard_deadline_holds_even_with_steady_output() -> None:
    t0 = time.monotonic()
    end, _ = anyio.run(
        lambda: _run(
            _py("import time\nwhile True:\n    print('.', flush=True); time.sleep(0.05)"),
            timeout=2.0,
            idle_timeout=1.0,  # output every 0.05 s: never idle, on a loaded machine too
        )
    )
    assert end.ending == "timeout"
    assert time.monotonic() - t0 < 10


def test_a_process_that_closes_its_output_but_keeps_running_is_ended_at_the_deadline() -> None:
    t0 = time.monotonic()
    end, _ = anyio.run(
        lambda: _run(
            _py("import os, time; os.close(1); time.sleep(60)"), timeout=1.0, idle_timeout=5.0
        )
    )
    assert end.ending == "timeout"
    assert time.monotonic() - t0 < 10


def test_what_it_leaves_running_in_its_group_goes_with_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " stdout=subprocess.DEVNULL)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
    )
    end, _ = anyio.run(_run, _py(code))
    assert end == Finished("exited", 0)
    child = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def test_a_cancelled_caller_leaves_no_process_behind(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    async def main() -> None:
        with anyio.move_on_after(1.0):
            await _run(
                _py(
                    f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
                )
            )

    anyio.run(main)
    assert not _alive(int(pidfile.read_text()))


def test_a_missing_program_is_an_os_error() -> None:
    with pytest.raises(OSError):
        anyio.run(_run, ["/nonexistent/program"])


_NAMED = 'open("/proc/self/comm", "wb").write(b") x) \\xff\\xfe"); '
"""A child's first words where it names itself with bytes that are not UTF-8 (``)`` and
spaces too: /proc shows the name in the line that says whose child it is)."""


@pytest.mark.parametrize(
    ("child_first", "parent_named"),
    [("", ""), (_NAMED, "open('/proc/self/comm', 'wb').write(b'\\xff) ('); time.sleep(0.3)")],
    ids=["plain", "named-with-any-bytes"],
)
def test_a_child_in_a_session_of_its_own_is_gone_as_a_timed_out_run_returns(
    child_first: str, parent_named: str
) -> None:
    """The group kill misses a child that left the group (``setsid``); what was below the
    process is killed too, and the call returns once all of it is gone. A name that is not
    UTF-8 (any process may give itself one) made every call raise before its kill. (One
    whose parent had already exited is no longer below it: outside bubblewrap, that one is
    not found.)"""
    child = child_first + "import time; time.sleep(60)"
    code = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {child!r}],"
        " start_new_session=True, stdout=subprocess.DEVNULL)\n"
        f"{parent_named}\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    end, out = anyio.run(lambda: _run(_py(code), timeout=2.0))
    assert end.ending == "timeout"
    pid = int(out.split()[0])
    assert not _alive(pid), "a child in a session of its own outlived the call"
