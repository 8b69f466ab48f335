"""The upstream CRDs in testbed/crds are the ones SOURCES.md names, byte for byte.

Every file there is listed, every listed file is there, and each file's sha256 and git blob id
(what ``git hash-object`` prints, equal to the upstream tree entry) are the table's. Each holds
one CustomResourceDefinition, named as its file says.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from testbed.paths import CRD_DIR, REPO, crd_files
from tests import schemas

SOURCES = CRD_DIR / "SOURCES.md"
COLUMNS = ["file", "repository", "version", "path", "sha256", "git blob"]


def rows() -> dict[str, dict[str, str]]:
    """SOURCES.md's table, one dict per file."""
    lines = [line for line in SOURCES.read_text().splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == COLUMNS
    table: dict[str, dict[str, str]] = {}
    for line in lines[2:]:
        cells = dict(
            zip(COLUMNS, (cell.strip() for cell in line.strip("|").split("|")), strict=True)
        )
        assert cells["file"] not in table, f"{cells['file']} is listed twice"
        table[cells["file"]] = cells
    return table


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_sources_lists_exactly_the_files_there() -> None:
    assert sorted(rows()) == [p.name for p in crd_files()]


@pytest.mark.parametrize("name", sorted(rows()))
def test_checksums_match(name: str) -> None:
    row = rows()[name]
    data = (CRD_DIR / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == row["sha256"]
    assert git_blob(data) == row["git blob"]
    assert row["repository"].count("/") == 1
    assert Path(row["path"]).suffix == ".yaml"
    assert row["version"].startswith("v")


@pytest.mark.parametrize("name", sorted(rows()))
def test_each_file_is_one_crd(name: str) -> None:
    text = (CRD_DIR / name).read_text()
    documents = [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d is not None]
    assert len(documents) == 1
    crd = documents[0]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    # <group>_<plural>.yaml, as controller-gen names them (mpi-operator's MPIJob adds its version)
    assert name.removesuffix(".yaml").split("_")[:2] == [group, plural]
    assert [(v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [(True, True)]


def test_git_blob_is_what_git_hash_object_prints() -> None:
    # The blob id of b"hello\n", as `printf 'hello\n' | git hash-object --stdin` prints it.
    assert git_blob(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_nothing_reaches_outside_the_repository() -> None:
    """Code, tests and docs read and cite only what is in the repository: a clone runs alone."""
    outside = ("../" + "shared", "shared/" + "fixtures", "FACTS" + ".md")
    tops = ["bench", "charts", "docs", "examples", "manifests", "scripts", "testbed", "tests"]
    files = [p for top in tops for p in (REPO / top).rglob("*") if p.is_file()]
    files += [REPO / name for name in ("Makefile", "README.md", "CHANGELOG.md", "Dockerfile")]
    files += [*(REPO / "webhook").rglob("*.py"), REPO / ".ci" / "run"]
    found = []
    for path in files:
        if "__pycache__" in path.parts or path.suffix in {".pyc", ".png", ".svg"}:
            continue
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:  # removed since the listing (another run's temporary file)
            continue
        found += [f"{path.relative_to(REPO)}: {word}" for word in outside if word in text]
    assert found == []


def test_the_unit_tests_read_the_same_directory() -> None:
    assert schemas.CRDS == CRD_DIR
