"""The codebase keeps its own rules: ruff clean, imports one way and in no circle, the actors in
rooms by role, no room too big, no class too long without saying why, every folder says what it
is (docs/architecture.md)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent
# Each layer is a folder at the top of the tree, installed as `rafka.<folder>`; `rafka/` itself is
# the front door.
LAYERS = ("common", "logstore", "coordination", "wire", "actors", "pipelines", "cli")
# What each layer may import from the others.
ALLOWED = {
    "common": set(),
    "logstore": {"common"},
    "coordination": {"common"},
    # Kafka's wire protocol, without I/O: record batches are converted with the log's codec.
    "wire": {"common", "logstore"},
    "actors": {"common", "coordination", "logstore", "wire"},
    "pipelines": {"common", "actors"},
    "cli": {"common", "actors", "pipelines", "coordination", "logstore", "wire"},
}
# The rooms of `actors/`, and which others each may import. The modules at the root of `actors/`
# are what every room shares and import no room, except `cluster`, the API on top of them all.
ROOMS = {
    "dataport": set(),
    "clients": {"dataport"},
    "txn": set(),
    "group": {"txn"},
    "kafka": {"group", "txn", "dataport"},
    "controller": set(),
    "server": {"controller", "kafka", "group", "txn", "dataport"},
}
TOP_OF_ACTORS = {"rafka.actors.cluster"}
# No folder's own modules may hold more than this share of the code.
LARGEST_SHARE = 0.30
# A class longer than this many lines says why in its docstring ("Why this class is large:").
LONGEST_CLASS = 420


def _module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts[0] == "rafka" else ".".join(["rafka", *parts])


def _source_files() -> Iterator[Path]:
    # rafka/<layer> links to <layer>/: each file is read once, where it lies.
    yield from (ROOT / "rafka").glob("*.py")
    for layer in LAYERS:
        yield from (ROOT / layer).rglob("*.py")


MODULES = {_module_name(path): path for path in _source_files()}


def _imports(path: Path) -> set[str]:
    """Every rafka module `path` imports, wherever the import stands (functions and
    TYPE_CHECKING blocks included: a circle hidden there is still a circle)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in MODULES else node.module)
    return {name for name in found if name in MODULES}


GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "rafka"


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[1] == "actors" and len(parts) > 3 and parts[2] in ROOMS:
        return parts[2]
    return None


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_run_one_way(layer: str) -> None:
    offenders = {
        module: sorted(wrong)
        for module, imported in GRAPH.items()
        if _layer(module) == layer
        and (wrong := {_layer(name) for name in imported} - ALLOWED[layer] - {layer})
    }
    assert not offenders, f"{layer} may import only {sorted(ALLOWED[layer])}: {offenders}"


def test_each_room_of_actors_imports_only_what_it_may() -> None:
    offenders = {}
    for module, imported in GRAPH.items():
        if _layer(module) != "actors" or module in TOP_OF_ACTORS:
            continue
        room = _room(module)
        may = ROOMS[room] | {room} if room else set()
        wrong = {_room(name) for name in imported if _layer(name) == "actors"} - may - {None}
        if wrong:
            offenders[module] = sorted(wrong)
        if any(name in TOP_OF_ACTORS for name in imported):
            offenders.setdefault(module, []).append("cluster")
    assert not offenders, f"rooms import only the rooms below them ({ROOMS}): {offenders}"


def test_the_actor_tests_are_in_the_rooms_of_what_they_test() -> None:
    """tests/actors/ mirrors actors/: a folder per room, the shared modules' tests at its root."""
    tests = ROOT / "tests" / "actors"
    folders = {path.name for path in tests.iterdir()
               if path.is_dir() and path.name != "__pycache__"}
    assert folders == set(ROOMS), f"tests/actors/ folders {sorted(folders)}, rooms {sorted(ROOMS)}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                lowlink[node] = min(lowlink[node], lowlink[successor])
            elif successor in on_stack:
                lowlink[node] = min(lowlink[node], index[successor])
        if lowlink[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_anywhere() -> None:
    assert not _cycles(GRAPH)


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_folder_holds_more_than_its_share_of_the_code() -> None:
    lines = {path: len(path.read_text().splitlines()) for path in _source_files()}
    total = sum(lines.values())
    by_folder: dict[Path, int] = {}
    for path, count in lines.items():
        by_folder[path.parent] = by_folder.get(path.parent, 0) + count
    too_big = {str(folder.relative_to(ROOT)): f"{count / total:.0%}"
               for folder, count in by_folder.items() if count / total > LARGEST_SHARE}
    assert not too_big, f"split these by role (at most {LARGEST_SHARE:.0%} each): {too_big}"


def _long_classes_without_a_reason(source: str) -> dict[str, int]:
    """The classes of `source` longer than LONGEST_CLASS lines whose docstring does not say
    why, with their lengths."""
    return {
        node.name: node.end_lineno - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > LONGEST_CLASS
        and "Why this class is large" not in (ast.get_docstring(node) or "")
    }


def test_every_long_class_says_why_it_is_large() -> None:
    """Kafka's seams: a class past LONGEST_CLASS lines is split along one, or its docstring
    says why it is not ("Why this class is large: ...")."""
    unexplained = {
        f"{path.relative_to(ROOT)}:{name}": length
        for path in _source_files()
        for name, length in _long_classes_without_a_reason(path.read_text()).items()
    }
    assert not unexplained, (
        f"split these classes, or say in their docstrings why not (\"Why this class is "
        f"large: ...\"): {unexplained}")


def test_the_long_class_check_finds_a_long_class() -> None:
    body = "    x = 1\n" * LONGEST_CLASS
    assert _long_classes_without_a_reason(f"class Long:\n{body}") == {"Long": LONGEST_CLASS + 1}
    reason = '    """Why this class is large: it must be."""\n'
    assert _long_classes_without_a_reason(f"class Long:\n{reason}{body}") == {}
    assert _long_classes_without_a_reason(f"class Short:\n{body[:-10]}") == {}


def test_every_package_is_installed() -> None:
    """pyproject lists the packages by hand, and `rafka/<layer>` links to each layer's folder,
    so that installers and tools that read imports find `rafka.<layer>` where it is named."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert set(setuptools["packages"]) == packages
    assert "package-dir" not in setuptools
    for layer in LAYERS:
        link = ROOT / "rafka" / layer
        assert link.is_symlink() and link.resolve() == ROOT / layer, f"rafka/{layer} -> ../{layer}"


@pytest.mark.parametrize("layer", ["rafka", *LAYERS])
def test_every_package_says_what_it_is(layer: str) -> None:
    for init in (ROOT / layer).rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring, f"{init.relative_to(ROOT)} needs a module docstring"


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    result = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_type_checker_is_clean() -> None:
    """mypy, configured in pyproject.toml: strict on the pure layers, default elsewhere."""
    mypy = shutil.which("mypy") or str(Path(sys.executable).with_name("mypy"))
    result = subprocess.run([mypy], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# The modules on the produce, fetch, replication and controller paths: their functions answer
# typed replies (`rafka.actors.messages`), never a dict of fields a reader has to guess at.
TYPED_REPLY_MODULES = (
    "actors/messages.py", "actors/errors.py", "actors/dataport/*.py", "actors/controller/*.py",
    "actors/server/replica*.py", "actors/server/isr_manager.py", "actors/server/leader_reads.py",
    "actors/server/host_reads.py", "actors/server/fetch_session.py",
    "actors/server/host_maintenance.py", "actors/server/txn_markers.py",
    "actors/server/offset_manager.py",
    "actors/clients/producer.py", "actors/clients/sender.py", "actors/clients/consumer.py",
)
# What those modules answer to admin and observability requests (the CLI's describe commands,
# Kafka's DescribeProducers, path tracing), off those paths: fields for a table or a Kafka
# response, kept as maps.
ADMIN_ANSWERS = {"describe", "describe_replicas", "describe_fetching", "active_producers",
                 "stop_tracing_path"}
# The broker's own share of those paths: what the controller and its replica hosts call.
TYPED_BROKER_METHODS = {
    "leader_and_isr", "update_metadata", "update_topic_config", "stop_replicas",
    "update_partition_states", "_write_isr_changes",
}


def _untyped_dict(annotation: ast.expr) -> bool:
    """Whether a return annotation is (or holds) a bare `dict` or `dict[str, Any]`."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body
    subscripted = {id(node.value) for node in ast.walk(annotation)
                   if isinstance(node, ast.Subscript)}
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id == "dict" and id(node) not in subscripted:
            return True
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and node.value.id == "dict" and isinstance(node.slice, ast.Tuple)
                and [ast.unparse(element) for element in node.slice.elts] == ["str", "Any"]):
            return True
    return False


def _dict_answers(path: Path, only: set[str] | None = None) -> list[str]:
    """`path:line name` of each function (of those named `only`, if given) annotated to
    return an untyped dict."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (node.name in only if only is not None else node.name not in ADMIN_ANSWERS)
            and node.returns is not None and _untyped_dict(node.returns)]


def test_the_request_paths_answer_typed_replies() -> None:
    paths = sorted({path for pattern in TYPED_REPLY_MODULES for path in ROOT.glob(pattern)})
    assert ROOT / "actors" / "server" / "replica.py" in paths
    offenders = [found for path in paths for found in _dict_answers(path)]
    offenders += _dict_answers(ROOT / "actors" / "server" / "broker.py", TYPED_BROKER_METHODS)
    assert not offenders, f"answer a typed reply (rafka.actors.messages): {offenders}"


def test_the_typed_reply_check_finds_dicts() -> None:
    def returns(source: str) -> ast.expr:
        function = ast.parse(source).body[0]
        assert isinstance(function, ast.FunctionDef) and function.returns is not None
        return function.returns

    assert _untyped_dict(returns("def f() -> dict[str, Any]: ..."))
    assert _untyped_dict(returns("def f() -> Appended | dict[str, Any]: ..."))
    assert _untyped_dict(returns("def f() -> list[dict[str, Any]]: ..."))
    assert _untyped_dict(returns("def f() -> dict | None: ..."))
    assert _untyped_dict(returns("def f() -> 'dict': ..."))
    assert not _untyped_dict(returns("def f() -> dict[str, int]: ..."))
    assert not _untyped_dict(returns("def f() -> ErrorReply | None: ..."))
