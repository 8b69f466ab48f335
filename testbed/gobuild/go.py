"""Running the Go toolchain for the builder: versions from wrapper modules, cache keys, locks."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from testbed.paths import MODULES

__all__ = [
    "RECIPE",
    "STRIP",
    "BuildError",
    "GoMissing",
    "go",
    "go_available",
    "locked",
    "log",
    "module_files",
    "recipe_hash",
    "source_dir",
    "staging",
    "version",
]

#: Bump when the way binaries are built changes (flags, what is copied), so caches rebuild.
RECIPE = "1"
#: Static, stripped binaries.
STRIP = "-s -w"


class BuildError(RuntimeError):
    """A build failed or a wrapper module is broken."""


class GoMissing(BuildError):
    """``go`` is not on PATH."""


def log(component: str, message: str) -> None:
    print(f"[build {component}] {message}", file=sys.stderr, flush=True)


def go_available() -> bool:
    return shutil.which("go") is not None


def _go_env() -> dict[str, str]:
    env = dict(os.environ, CGO_ENABLED="0")
    flags = env.get("GOFLAGS", "")
    if "-p=" not in flags:
        env["GOFLAGS"] = f"{flags} -p=2".strip()
    return env


def go(*args: str, cwd: Path, build: bool = False, env: dict[str, str] | None = None) -> str:
    """Run ``go args`` in ``cwd``; its stdout (a build's goes to stderr, like its progress)."""
    if not go_available():
        raise GoMissing("go is not on PATH")
    command = ["nice", "-n", "10", "go", *args] if build else ["go", *args]
    result = subprocess.run(
        command,
        cwd=cwd,
        env={**_go_env(), **(env or {})},
        stdout=2 if build else subprocess.PIPE,  # a build's output is progress: stderr
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"`go {' '.join(args)}` in {cwd} exited with {result.returncode}")
    return (result.stdout or "").strip()


def version(module_dir: Path, module: str) -> str:
    """The version of ``module`` the wrapper module in ``module_dir`` requires."""
    found = go("list", "-m", "-f", "{{.Version}}", module, cwd=module_dir)
    if not found:
        raise BuildError(f"cannot read the version of {module} from {module_dir}/go.mod")
    return found


def source_dir(module_dir: Path, module: str) -> Path:
    """Where the module cache holds ``module``'s source tree (downloaded if needed)."""
    go("mod", "download", module, cwd=module_dir)
    return Path(go("list", "-m", "-f", "{{.Dir}}", module, cwd=module_dir))


def module_files(*module_dirs: Path) -> list[Path]:
    files: list[Path] = []
    for directory in module_dirs:
        files += [directory / "go.mod", directory / "go.sum", *sorted(directory.glob("*.go"))]
    return [f for f in files if f.is_file()]


def recipe_hash(files: Iterable[Path]) -> str:
    """8 hex digits over `RECIPE` and the files (their names under MODULES and contents)."""
    digest = hashlib.sha256(f"recipe {RECIPE}\n".encode())
    for path in files:
        digest.update(f"{path.relative_to(MODULES)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:8]


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """One builder at a time per cache entry."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A temp dir inside ``out`` (so the final move is a rename), removed unless moved away."""
    directory = Path(tempfile.mkdtemp(prefix="tmp.", dir=out))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
