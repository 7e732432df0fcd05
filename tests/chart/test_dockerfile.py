"""The Dockerfile, read without a Docker engine: pinned base, two stages, non-root, the
operator as entrypoint, and a build context of only what the build copies."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction in _instructions():
        if instruction[0] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def test_the_base_image_is_pinned_to_an_exact_version() -> None:
    (arg,) = [rest for word, rest in _instructions() if word == "ARG" and "PYTHON_IMAGE" in rest]
    image = arg.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image


def test_two_stages_and_the_last_builds_nothing() -> None:
    stages = _stages()
    assert len(stages) == 2
    runtime = " ".join(rest for word, rest in stages[-1] if word == "RUN")
    for tool in ("pip install", "apt-get install", "gcc", "build-essential"):
        assert tool not in runtime, tool
    assert ("COPY", "--from=build /opt/gpusched /opt/gpusched") in stages[-1]


def test_it_runs_as_a_numeric_non_root_user() -> None:
    (user,) = [rest for word, rest in _stages()[-1] if word == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0


def test_the_entrypoint_is_the_operator() -> None:
    (entrypoint,) = [rest for word, rest in _stages()[-1] if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["gpusched", "run"]


def test_the_build_context_holds_what_the_build_copies() -> None:
    """.dockerignore excludes everything but the copied paths, and those paths exist."""
    ignore = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert "*" in ignore
    copied: set[str] = set()
    for word, rest in _instructions():
        if word == "COPY" and not rest.startswith("--from"):
            copied.update(p.rstrip("/") for p in rest.split()[:-1])
    assert copied == allowed
    for path in copied:
        assert (ROOT / path).exists(), path
