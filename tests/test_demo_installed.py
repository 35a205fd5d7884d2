"""`pip install opdsl` then `opdsl demo`, in a fresh virtualenv that has only what installing
opdsl brings (no pytest, no ruff), offline: the wheel built from the checkout is installed
with pip, and its dependencies are the test environment's own, bar the test tools."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TEST_TOOLS = ("pytest", "_pytest", "py.py", "pluggy", "iniconfig", "_hypothesis_pytestplugin.py")
"""What the test environment has that ``pip install opdsl`` does not bring, and that the demo
must not need (pytest, and what only pytest needs)."""


def _run(*argv: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _dependencies(into: Path) -> Path:
    """A folder with the test environment's installed packages, linked, but opdsl's own (its
    editable install) and the test tools."""
    site = Path(sysconfig.get_paths()["purelib"])
    into.mkdir()
    for entry in site.iterdir():
        name = entry.name
        if (
            name.endswith(".pth")
            or name.startswith(("opdsl", "__editable__", "__pycache__"))
            or name.startswith(TEST_TOOLS)
            or name in ("op", "state", "interpreters", "programs")
        ):
            continue
        (into / name).symlink_to(entry)
    return into


def _source(into: Path) -> Path:
    """What building the wheel reads, copied (a build writes its build/ folder beside it)."""
    import shutil

    into.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, into / name)
    for package in ("op", "state", "interpreters", "programs"):
        shutil.copytree(
            ROOT / package, into / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return into


def test_pip_install_then_opdsl_demo_works_without_pytest(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    pip = (sys.executable, "-m", "pip")
    source = _source(tmp_path / "source")
    _run(
        *pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, source, cwd=tmp_path
    )
    (wheel,) = wheels.glob("opdsl-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(
        *pip,
        "--python",
        python,
        "install",
        "-q",
        "--no-compile",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
    )
    fresh_site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
        ).strip()
    )
    (fresh_site / "dependencies.pth").write_text(f"{_dependencies(tmp_path / 'deps')}\n")
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OPDSL_DB")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    home = tmp_path / "user"
    home.mkdir()
    # the environment is what a user's is: opdsl from the wheel, no pytest
    where = _run(
        python,
        "-c",
        "import interpreters, importlib.util as u; print(interpreters.__file__, u.find_spec('pytest'))",
        cwd=home,
        env=env,
    )
    assert where.startswith(str(fresh_site)) and where.strip().endswith("None"), where
    demo = subprocess.run(
        [venv / "bin" / "opdsl", "demo"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "result: ok=True" in demo.stdout and "identical: the run is deterministic" in demo.stdout
    assert "ok=True; the files came back from the checkpoint's snapshot" in demo.stdout
