"""nvcc with its host and device passes at once: the compiler torch's extension builds call.

nvcc runs the passes of one ``.cu`` file one after another: preprocess for the host, the
host front end (``cudafe++``), preprocess for the device, the device compiler (``cicc``),
``ptxas``, ``fatbinary``, then the host compile that embeds the device code. With torch's
headers in the file, ``cudafe++`` and ``cicc`` each parse all of ATen (seconds of CPU each in
a torch ``load_inline`` candidate's build), yet neither reads
the other's output: they share only a module id, which ``cudafe++`` writes and ``cicc`` reads.
Here nvcc only says its passes (``-dryrun``, intermediates in a folder of our own); the id is
written first (named the way nvcc names it, from the file, the arguments and the text), and
the host chain and the device chain run at once; the host compile runs when both are done.
The object file is nvcc's, but for the id's bytes. A command whose passes look any other way
(relocatable device code, several files, a query) runs nvcc itself, unchanged.

torch's build calls it through ``PYTORCH_NVCC`` (``command``); ``NSIGHT_AGENT_NVCC_SPLIT=0``
turns it off. Run as a script it needs the standard library only::

    python nvcc_split.py --nvcc /usr/local/cuda/bin/nvcc <nvcc's arguments>
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

ENV = "NSIGHT_AGENT_NVCC_SPLIT"
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_DEPS = re.compile(r"^-- Filter Dependencies -- > (.+)$")


def command(nvcc: str) -> str | None:
    """``PYTORCH_NVCC``'s value that builds through this module; None when turned off."""
    if os.environ.get(ENV) == "0" or not sys.platform.startswith("linux"):
        return None  # the passes run through bash, as nvcc's dry run writes them
    if not Path(nvcc).is_file() or shutil.which("bash") is None:
        return None
    return shlex.join([sys.executable or "python3", str(Path(__file__).resolve()), "--nvcc", nvcc])


@dataclass
class Passes:
    """One compile's passes, as nvcc would run them, split in two chains and a last step."""

    env: dict[str, str]
    host: list[str]  # preprocess for the host, then cudafe++
    device: list[str]  # preprocess for each arch, cicc, ptxas, fatbinary
    last: str  # the host compile
    module_id: tuple[str, str]  # (the file nvcc names, the id written into it)
    depfile: str | None = None  # --dependency-output: made of the preprocessors' rules
    depfile_parts: list[str] = field(default_factory=list)  # one per preprocessor


def _quoted(command: str, flag: str) -> str | None:
    found = re.search(rf'{flag} "([^"]+)"', command)
    return found.group(1) if found else None


def module_id(source: str, argv: list[str]) -> str:
    """An id shaped as nvcc's (``_<8 hex>_<length>_<file>_<8 hex>``), from the file's path,
    its text and the arguments: the same build gets the same id, two files two ids."""
    name = re.sub(r"\W", "_", os.path.basename(source))
    seed = [os.path.abspath(source), *argv]
    with contextlib.suppress(OSError):
        seed.append(Path(source).read_text(errors="replace"))
    digest = hashlib.sha256("\0".join(seed).encode()).hexdigest()
    return f"_{digest[:8]}_{len(name)}_{name}_{digest[8:16]}"


def plan(lines: list[str], argv: list[str]) -> Passes | None:
    """nvcc's ``-dryrun`` lines as two chains, or None when they are not one file's usual
    passes (then nvcc runs itself)."""
    env = dict(os.environ)
    commands: list[str] = []
    depfile = None
    for line in lines:
        if _ASSIGN.match(line):
            name, value = line.split("=", 1)
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"' and value.count('"') == 2:
                value = value[1:-1]
            env[name] = value
        elif (deps := _DEPS.match(line)) is not None:
            depfile = deps.group(1).strip()
        elif line.startswith("--") or "nvlink" in line:
            return None  # a pass nvcc runs within itself, a device link: not split
        else:
            commands.append(line)
    if len(commands) < 5 or " -c " not in commands[-1] or ".cudafe1.cpp" not in commands[-1]:
        return None
    last = commands.pop()
    preprocess = [c for c in commands if " -E " in c]
    host_pre = [c for c in preprocess if "-D__CUDA_ARCH__=" not in c]
    cudafe = [c for c in commands if c.startswith("cudafe++")]
    if len(host_pre) != 1 or len(cudafe) != 1 or not any("cicc" in c for c in commands):
        return None
    if "-D__CUDACC_RDC__" in host_pre[0]:  # relocatable device code: its id names a link
        return None
    id_file = _quoted(cudafe[0], "--module_id_file_name")
    source = _quoted(cudafe[0], "--orig_src_path_name") or _quoted(
        cudafe[0], "--orig_src_file_name"
    )
    if "--gen_module_id_file" not in cudafe[0] or id_file is None or source is None:
        return None
    device = [c for c in commands if c not in (host_pre[0], cudafe[0])]
    host = [host_pre[0], cudafe[0].replace("--gen_module_id_file ", "")]
    parts: list[str] = []
    if depfile is not None:  # nvcc's own filter of the preprocessors' lines: gcc writes them
        target = shlex.quote(_quoted(last, "-o") or "")
        for chain in (host, device):
            for i, step in enumerate(chain):
                if " -E " in step:
                    parts.append(f"{depfile}.part{len(parts)}")
                    chain[i] = f"{step} -MD -MF {shlex.quote(parts[-1])} -MT {target}"
    return Passes(env, host, device, last, (id_file, module_id(source, argv)), depfile, parts)


def merge_depfiles(depfile: str, parts: list[str]) -> None:
    """One make rule from the preprocessors' rules: the target, every file either read."""
    target, seen = "", {}
    for part in parts:
        text = Path(part).read_text().replace("\\\n", " ")
        head, _, deps = text.partition(": ")
        target = target or head.strip()
        seen.update(dict.fromkeys(d for d in re.split(r"(?<!\\)\s+", deps) if d))
        Path(part).unlink()
    Path(depfile).write_text(f"{target}: " + " \\\n ".join(seen) + "\n")


def _chain(steps: list[str], env: dict[str, str], out: list[bytes], stop: threading.Event) -> int:
    for step in steps:
        if stop.is_set():
            return -1
        done = subprocess.run(["bash", "-c", step], env=env, capture_output=True)
        out.append(done.stdout + done.stderr)
        if done.returncode and not step.startswith("rm "):
            return done.returncode
    return 0


def run(passes: Passes) -> int:
    """The two chains at once, their output in nvcc's order (the host's first); a host chain
    that failed stops there, as nvcc would have."""
    Path(passes.module_id[0]).write_text(passes.module_id[1])
    outputs: dict[str, list[bytes]] = {"host": [], "device": []}
    codes: dict[str, int] = {}
    stop = threading.Event()

    def chain(name: str, steps: list[str]) -> None:
        codes[name] = _chain(steps, passes.env, outputs[name], stop)
        if codes[name] and name == "host":
            stop.set()

    threads = [
        threading.Thread(target=chain, args=(name, steps))
        for name, steps in (("host", passes.host), ("device", passes.device))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shown = ["host"] if codes.get("host") else ["host", "device"]
    for name in shown:
        for chunk in outputs[name]:
            sys.stderr.buffer.write(chunk)
    sys.stderr.flush()
    failed = codes.get("host") or codes.get("device")
    if failed:
        for part in passes.depfile_parts:
            Path(part).unlink(missing_ok=True)
        return failed
    if passes.depfile is not None:
        merge_depfiles(passes.depfile, passes.depfile_parts)
    return subprocess.run(["bash", "-c", passes.last], env=passes.env).returncode


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--nvcc":
        print("usage: nvcc_split.py --nvcc NVCC <nvcc arguments>", file=sys.stderr)
        return 2
    nvcc, args = argv[1], argv[2:]
    keep = tempfile.mkdtemp(prefix="nvcc-split-")
    try:
        dry = subprocess.run(
            [nvcc, "-dryrun", "-keep", "-keep-dir", keep, *args], capture_output=True, text=True
        )
        lines = [line[3:] for line in dry.stderr.splitlines() if line.startswith("#$ ")]
        passes = plan(lines, args) if dry.returncode == 0 else None
        if passes is None:
            return subprocess.run([nvcc, *args]).returncode
        return run(passes)
    finally:
        shutil.rmtree(keep, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
