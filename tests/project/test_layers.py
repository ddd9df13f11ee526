"""The layers of docs/architecture.md, checked: schemas (contracts) <- media (foreign media both sides decode) <-
packer (writes) and loader (reads) <- cli.

- every project module imports on its own, in a fresh interpreter (an import that only works after some other
  module was imported first is a hidden cycle or a missing import);
- no import cycle among project modules: over module-level imports (what runs when a module is imported), nor
  closed by an import inside a function (a lazy import that dodges a cycle is still one);
- ``schemas/`` imports nothing from ``media/``, ``packer/``, ``loader/`` or the CLI, at any level (it is what both sides
  share), and holds contracts only: no decoder, storage client or torch (``SCHEMAS_NEVER_IMPORT``), at any level;
- ``media/`` imports of the project only ``schemas/`` (``packer/`` and ``loader/`` both read what it decodes);
- ``packer/`` reads packs only through the pack reader: of ``loader/`` it imports ``PACK_READER`` and nothing else;
- the pack reader (``loader/pack/``) imports no task package (``loader/tse``, ``loader/asd``, ``loader/asr``), not
  even through the modules it imports;
- ``loader/`` imports nothing from ``packer/`` or the CLI;
- ``packer/build`` does not import back into packer's top modules (``packer/*.py``) except ``PACKER_FOUNDATIONS``
  (the file helpers, the destination's lock and ownership), which import nothing else of packer;
- the generic loader names no task: no module of ``loader/`` outside the task packages (``TASK_PACKAGES``) imports
  one, at any level (the registry, ``loader.tasks``, finds a task's module by its dotted path with ``importlib``
  when a config names it), nor compares a value with a task's name;
- ASD imports nothing from TSE (what they share lives in the generic loader, e.g. ``loader.rng``);
- torch is imported (module level) only by ``TORCH_MODULES``, so packing and validation never load it;
- click is imported (at any level) only by ``speechpack.cli``: the library declares options as plain data
  (``packer.adapters.option_spec``) and the command line alone knows click.

Known violations that other work in progress removes are listed in ``EXPECTED`` with who removes them; an entry
that no longer occurs fails the test, so the list shrinks as they are fixed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

import factories.paths

REPO = str(factories.paths.REPO)
PACKAGES = ("schemas", "media", "packer", "loader")
TOP_MODULES = ("cli",)

#: Third-party libraries ``schemas/`` never imports (at any level): it holds contracts, and decoding lives in ``media/``.
SCHEMAS_NEVER_IMPORT = ("soundfile", "soxr", "av", "cv2", "lmdb", "fsspec", "torch")
#: What ``packer/`` may import from ``loader/``: the pack reader (``loader.pack``, cue banks included) and its package.
PACK_READER = frozenset({"speechpack.loader", "speechpack.loader.pack"})
#: packer's top modules (``packer/*.py``) that ``packer/build`` stands on: the file helpers and a destination's lock
#: and ownership records.  They import nothing of packer but each other, so packer -> build runs one way: the
#: tools on top (validate, copy, inspect, demo, import, export) use the build; the build never imports them back.
PACKER_FOUNDATIONS = frozenset({"speechpack.packer.files", "speechpack.packer.ownership"})
#: The task packages (docs/extending.md, "A loader task"): the pack reader must not reach them, and the rest of
#: ``loader/`` is the generic loader, which names none of them.
TASK_PACKAGES = ("speechpack.loader.tse", "speechpack.loader.asd", "speechpack.loader.asr")
#: Modules that import torch at module level: the DataLoader glue, the ASR modules that compute in torch and TSE's
#: augmentation where training runs.
TORCH_MODULES = frozenset({"speechpack.loader.torch", "speechpack.loader.asr.task", "speechpack.loader.asr.features",
                           "speechpack.loader.tse.batch_augment"})

#: The task names of ``TASK_PACKAGES`` (``loader.tasks.TASK_MODULES``, the one module that may spell them).
TASK_NAMES = frozenset({"tse", "asd", "asr"})
REGISTRY = "speechpack.loader.tasks"

#: Known violations, each removed by work in progress; remove an entry once it no longer occurs (the test says so).
EXPECTED: dict = {}


def _modules() -> dict[str, str]:
    """Every project module: dotted name -> file."""
    found = {f"speechpack.{name}": os.path.join(REPO, f"{name}.py") for name in TOP_MODULES}
    found["speechpack"] = os.path.join(REPO, "__init__.py")
    for package in PACKAGES:
        for root, dirs, files in os.walk(os.path.join(REPO, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for file in sorted(files):
                if not file.endswith(".py"):
                    continue
                parts = os.path.relpath(os.path.join(root, file), REPO)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(["speechpack", *parts])] = os.path.join(root, file)
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, module_level: bool) -> set[str]:
    """Project modules that ``module`` imports: at module level only (what runs on import), or anywhere in the
    file (functions too); ``if TYPE_CHECKING`` blocks never count."""
    with open(MODULES[module], encoding="utf-8") as fp:
        tree = ast.parse(fp.read(), MODULES[module])
    is_package = MODULES[module].endswith("__init__.py")
    nodes: list[ast.AST] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                nodes.append(node)
            elif isinstance(node, ast.If):
                if not _is_type_checking(node):
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(part)
            elif isinstance(node, (ast.With, ast.For, ast.While)):
                visit(node.body)

    if module_level:
        visit(tree.body)
    else:
        hidden = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block)
                  for stmt in block.body for n in ast.walk(stmt)}
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in hidden]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from package import submodule`` needs the submodule; ``from module import name``, the module
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in MODULES]
            names = submodules + ([base] if len(submodules) < len(node.names) else [])
        found.update(name for name in names if name in MODULES and name != module)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def _is_pack_reader(module: str) -> bool:
    """The reader floor: ``speechpack.loader.pack`` and everything under it, plus ``PACK_READER``."""
    return module in PACK_READER or module.startswith("speechpack.loader.pack.")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _task_package(module: str) -> str | None:
    """The task package ``module`` belongs to, or None."""
    return next((package for package in TASK_PACKAGES if _in(module, package)), None)


def _is_generic_loader(module: str) -> bool:
    """A module of the generic loader: under ``loader/``, outside the task packages.  The pack reader's floor has
    its own rule (``_is_pack_reader``), and ``speechpack.loader`` itself only re-exports."""
    return (_in(module, "speechpack.loader") and module != "speechpack.loader" and _task_package(module) is None
            and not _is_pack_reader(module))


def _layer(module: str) -> str:
    """``speechpack.loader.tse.task`` -> ``loader``; the package itself is its own layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_task_module(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in TASK_PACKAGES)


def _reached(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    """Every module ``start`` imports, directly or through the modules it imports."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def _found_violations() -> set[tuple]:
    module_level = {name: _imports(name, module_level=True) for name in MODULES}
    anywhere = {name: _imports(name, module_level=False) for name in MODULES}
    found: set[tuple] = {("cycle", component) for component in _cycles(module_level) + _cycles(anywhere)}
    floor = {name for name in MODULES if name == "speechpack.loader.pack" or name.startswith("speechpack.loader.pack.")}
    for target in _reached(anywhere, floor):
        if _is_task_module(target):
            found.add(("pack reader reaches a task module", target))
    for name, imported in anywhere.items():
        layer = _layer(name)
        for target in imported:
            target_layer = _layer(target)
            if layer == "schemas" and target_layer != "schemas":
                found.add(("layer", (name, target)))
            elif layer == "media" and target_layer not in ("schemas", "media"):
                found.add(("layer", (name, target)))
            elif layer == "packer" and target_layer in ("loader", "cli") and not _is_pack_reader(target):
                found.add(("layer", (name, target)))
            elif layer == "loader" and target_layer in ("packer", "cli"):
                found.add(("layer", (name, target)))
            if _in(name, "speechpack.packer.build") and _is_packer_top(target) and target not in PACKER_FOUNDATIONS:
                found.add(("packer/build imports back into packer's top modules", (name, target)))
            if name in PACKER_FOUNDATIONS and _in(target, "speechpack.packer") and target not in PACKER_FOUNDATIONS:
                found.add(("a packer foundation imports the rest of packer", (name, target)))
            if _is_generic_loader(name) and _task_package(target) is not None:
                found.add(("generic loader imports a task", (name, target)))
            if _in(name, "speechpack.loader.asd") and _in(target, "speechpack.loader.tse"):
                found.add(("asd imports tse", (name, target)))
    return found


def _is_packer_top(module: str) -> bool:
    """A module directly in ``packer/`` (``speechpack.packer.demo``), not a subpackage."""
    parts = module.split(".")
    return len(parts) == 3 and parts[1] == "packer" and not MODULES[module].endswith("__init__.py")


def test_no_cycles_and_each_layer_imports_only_what_it_may():
    found = _found_violations()
    unexpected = sorted(found - set(EXPECTED))
    fixed = sorted(set(EXPECTED) - found)
    assert not unexpected, f"import cycles or layer violations (docs/architecture.md): {unexpected}"
    assert not fixed, f"fixed, so remove them from EXPECTED in tests/project/test_layers.py: {fixed}"


def test_the_generic_loader_compares_nothing_with_a_task_name():
    """A branch on ``config.task == "asr"`` is a task hook in the wrong place (``loader.tasks.LoaderTask``)."""
    found = []
    for name, path in MODULES.items():
        if not _is_generic_loader(name) or name == REGISTRY:
            continue
        with open(path, encoding="utf-8") as fp:
            tree = ast.parse(fp.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
                if any(isinstance(v, ast.Constant) and v.value in TASK_NAMES for v in values):
                    found.append(f"{name}:{node.lineno}")
    assert not found, f"the generic loader branches on a task's name (make it a LoaderTask hook): {found}"


def test_the_pack_reader_reaches_no_task_module():
    """What the floor reaches, named: no module of a task package, directly or through another module."""
    anywhere = {name: _imports(name, module_level=False) for name in MODULES}
    floor = {name for name in MODULES if name == "speechpack.loader.pack" or name.startswith("speechpack.loader.pack.")}
    reached = {name for name in _reached(anywhere, floor) if _is_task_module(name)}
    assert not reached, sorted(reached)


def test_the_walk_sees_the_imports_it_checks():
    """The walker itself: a known module-level import, a lazy one, and a TYPE_CHECKING one."""
    assert "speechpack.loader.pack" in _imports("speechpack.packer.validate.pack", module_level=True)
    assert "speechpack.loader.asd.levels" not in _imports("speechpack.cli", module_level=True)
    assert "speechpack.loader.asd.levels" in _imports("speechpack.cli", module_level=False)
    assert "speechpack.schemas.timebase" in _imports("speechpack.loader.asd.timeline", module_level=True)
    assert _is_packer_top("speechpack.packer.demo") and not _is_packer_top("speechpack.packer.build")
    assert "speechpack.packer.files" in _imports("speechpack.packer.build.writer", module_level=True)
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [("a", "b", "c")]


def test_torch_is_imported_only_where_stated():
    importing = set()
    for name, path in MODULES.items():
        with open(path, encoding="utf-8") as fp:
            tree = ast.parse(fp.read(), path)
        for node in tree.body:
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "torch" or n.startswith("torch.") for n in names):
                importing.add(name)
    assert importing == TORCH_MODULES


def _third_party_imports(path: str, package: str) -> bool:
    """Whether the file imports ``package`` (or one of its modules) anywhere: module level, functions, any branch."""
    with open(path, encoding="utf-8") as fp:
        tree = ast.parse(fp.read(), path)
    for node in ast.walk(tree):
        names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        if any(n == package or n.startswith(package + ".") for n in names):
            return True
    return False


def test_schemas_import_no_decoder_storage_client_or_torch():
    """``schemas/`` is the contracts both sides share: whatever reads media or storage is a layer above it."""
    importing = sorted((name, package) for name, path in MODULES.items() if _layer(name) == "schemas"
                       for package in SCHEMAS_NEVER_IMPORT if _third_party_imports(path, package))
    assert not importing, f"schemas/ imports a decoder, storage client or torch (move it to media/): {importing}"


def test_the_media_layer_is_checked():
    """The walker sees ``media/``: its modules are project modules, and a loader module imports one."""
    assert "speechpack.media.noise_lmdb" in MODULES
    assert "speechpack.media.noise_lmdb" in _imports("speechpack.loader.tse.augment", module_level=True)
    assert _layer("speechpack.media.sound_blocks") == "media"


def test_click_is_imported_only_by_the_cli():
    importing = {name for name, path in MODULES.items() if _third_party_imports(path, "click")}
    assert importing == {"speechpack.cli"}


def _third_party_at_module_level() -> list[str]:
    """Every library a project module imports at module level (what a child would otherwise import again)."""
    found = set()
    for path in MODULES.values():
        with open(path, encoding="utf-8") as fp:
            tree = ast.parse(fp.read(), path)
        for node in tree.body:
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module
                     else [])
            found.update(name.split(".")[0] for name in names)
    return sorted(found - set(sys.stdlib_module_names) - {"speechpack", "__future__"})


#: Third-party imports done once before forking, so that each child pays only for the project's own modules (a
#: library that is not installed is left out: the child importing a module that needs it then fails, naming it).
_PRELOAD = f"""
import importlib, importlib.util
for library in {_third_party_at_module_level()!r}:
    if importlib.util.find_spec(library) is not None:
        importlib.import_module(library)
"""
_IMPORT_EACH = r"""
import importlib, os, sys, traceback
failed, running, waiting = [], {}, list(sys.argv[1:])
at_once = max(1, len(os.sched_getaffinity(0)))  # children are independent: one per core
while waiting or running:
    while waiting and len(running) < at_once:
        name = waiting.pop(0)
        pid = os.fork()
        if pid == 0:  # a child that has imported no project module yet
            try:
                importlib.import_module(name)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        running[pid] = name
    pid, status = os.wait()
    if status != 0:
        failed.append(running[pid])
    del running[pid]
print("FAILED", " ".join(sorted(failed)))
sys.exit(1 if failed else 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="imports each module in a forked child")
def test_every_module_imports_on_its_own():
    """Each module in a process where no project module was imported before: forked from a fresh interpreter that
    imported only third-party libraries (so each child does not pay for them again)."""
    script = _PRELOAD + _IMPORT_EACH
    result = subprocess.run([sys.executable, "-c", script, *sorted(MODULES)], cwd=REPO, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
