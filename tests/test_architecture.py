"""The layer map of docs/architecture.md, enforced: which part of vitlab may import which, no import
cycles between modules, no module over MAX_LINES lines, and a model part that is plain PyTorch (no
file I/O, subprocess, ctypes or private torch name under vitlab/model/).

Every `import` and `from ... import` of every module under src/vitlab counts, absolute or relative,
at the top, inside a function or under `if TYPE_CHECKING:`. Each failure names the file, the line
and the import.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO_ROOT

SRC = REPO_ROOT / "src"

# Lowest first: each package may import the foundation, itself, and the packages listed.
# The foundation is every module at the root of vitlab (errors.py, textfiles.py, ...): errors.py
# imports nothing from vitlab, the others only the foundation. vitlab/__init__.py and
# vitlab/__main__.py are the public face and may import anything; nothing else imports them.
MAY_IMPORT: dict[str, set[str]] = {
    "model": set(),
    "data": set(),
    "accel": {"model"},
    "memory": {"model"},
    "weights": {"model", "memory"},
    "evaluate": {"model", "data", "accel"},
    "analysis": {"model", "data"},
    "training": {"model", "accel", "memory", "weights", "data", "evaluate"},
    "export": {"model", "accel", "memory", "weights", "data", "evaluate", "analysis"},
    "serve": {"model", "accel", "memory", "weights", "data", "evaluate", "analysis"},
    "bench": {"model", "accel", "memory", "weights", "data", "evaluate", "analysis", "training", "export", "serve"},
    "experiments": {
        "model",
        "accel",
        "memory",
        "weights",
        "data",
        "evaluate",
        "analysis",
        "training",
        "export",
        "serve",
        "bench",
    },
    "cli": {
        "model",
        "accel",
        "memory",
        "weights",
        "data",
        "evaluate",
        "analysis",
        "training",
        "export",
        "serve",
        "experiments",
        "bench",
        "public",
    },
}
FOUNDATION, PUBLIC = "foundation", "public"
MAX_LINES = 400
LONG_MODULES_ALLOWED: dict[str, str] = {}  # "vitlab/x.py": why it cannot be split (none today)

# Violations in the tree today that the changes under way remove. Each entry is checked: one that
# no longer occurs fails the test until it is deleted here, so these lists only shrink (to empty).
KNOWN_LAYER_VIOLATIONS: set[tuple[str, str]] = set()
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_LONG_MODULES: set[str] = set()


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "vitlab.model.vit"
    file: str  # "vitlab/model/vit.py"
    line: int
    text: str  # the statement as written (normalised)
    target: str  # imported vitlab module, e.g. "vitlab.weights.folder"

    def where(self) -> str:
        return f"src/{self.file}:{self.line}: `{self.text}`"


def modules(src: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under src/vitlab (a package's __init__ is the package)."""
    found = {}
    for path in sorted((src / "vitlab").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(src: Path) -> list[Import]:
    """Every import of a vitlab module by a vitlab module, resolved to the module it names."""
    known = modules(src)
    found = []
    for name, path in known.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        file = path.relative_to(src).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (package[: len(package) - node.level + 1] if node.level else []) + (
                    node.module.split(".") if node.module else []
                )
                base_name = ".".join(base)
                # `from pkg import sub` names the submodule when there is one, else a name in pkg.
                targets = [
                    f"{base_name}.{a.name}" if f"{base_name}.{a.name}" in known else base_name for a in node.names
                ]
            else:
                continue
            for target in dict.fromkeys(targets):
                if target == "vitlab" or target.startswith("vitlab."):
                    found.append(Import(name, file, node.lineno, ast.unparse(node), owner(target, known)))
    return found


def owner(target: str, known: dict[str, Path]) -> str:
    """The module an imported name lives in: `import vitlab.model.vit.x` is vitlab.model.vit."""
    while target not in known and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def layer(module: str, known: dict[str, Path]) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return PUBLIC
    if len(parts) == 2 and known[module].name != "__init__.py":
        return FOUNDATION
    return parts[1]


def layer_violations(src: Path) -> list[tuple[Import, str]]:
    known = modules(src)
    found = []
    for imp in imports(src):
        source, target = layer(imp.source, known), layer(imp.target, known)
        if source == PUBLIC or target == source and source != FOUNDATION:
            continue
        if source == FOUNDATION:
            if imp.source == "vitlab.errors":
                found.append((imp, "vitlab.errors imports nothing from vitlab"))
            elif target != FOUNDATION:
                found.append((imp, f"{imp.source} is foundation: it may import the foundation only"))
        elif source not in MAY_IMPORT:
            found.append((imp, f"package vitlab.{source} has no layer in docs/architecture.md"))
        elif target == PUBLIC and PUBLIC not in MAY_IMPORT[source]:
            found.append((imp, f"{source} imports {imp.target}, the public face; import the defining module"))
        elif target not in (FOUNDATION, PUBLIC) and target not in MAY_IMPORT[source]:
            allowed = ", ".join(sorted(MAY_IMPORT[source])) or "nothing"
            found.append((imp, f"{source} may import the foundation and {allowed}, not {target}"))
    return found


def cycles(src: Path) -> list[tuple[frozenset[str], list[Import]]]:
    """Strongly connected groups of modules (Tarjan), each with the imports inside it.

    Imports against the layers are left out: test_imports_follow_the_layers names each, and the
    layers allow no cycle between packages, so what remains is a cycle inside one package.
    """
    against = {(imp.source, imp.line, imp.target) for imp, _ in layer_violations(src)}
    edges: dict[str, list[Import]] = {}
    for imp in imports(src):
        if imp.target != imp.source and (imp.source, imp.line, imp.target) not in against:
            edges.setdefault(imp.source, []).append(imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for imp in edges.get(node, []):
            if imp.target not in index:
                visit(imp.target)
                low[node] = min(low[node], low[imp.target])
            elif imp.target in stack:
                low[node] = min(low[node], index[imp.target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                inside = list(
                    {(i.file, i.line): i for g in sorted(group) for i in edges.get(g, []) if i.target in group}.values()
                )
                groups.append((frozenset(group), inside))

    for node in modules(src):
        if node not in index:
            visit(node)
    return groups


def long_modules(src: Path) -> dict[str, int]:
    return {
        path.relative_to(src).as_posix(): n
        for path in modules(src).values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }


# The model is plain PyTorch: what it may not use, by module imported and by name called.
PLAIN_PART = "model"
NOT_IN_PLAIN: dict[str, str] = {
    "subprocess": "runs a process",
    "ctypes": "loads native code",
    "os": "reaches the file system and the environment",
    "pathlib": "reaches files",
    "io": "reaches files",
    "shutil": "reaches files",
    "tempfile": "writes files",
    "glob": "reaches files",
    "filelock": "writes lock files",
    "platform": "asks the machine (and may run a process)",
    "socket": "reaches the network",
}
NOT_CALLED_IN_PLAIN = {"open": "opens a file", "exec": "runs code", "eval": "runs code", "__import__": "imports"}


def dotted(node: ast.AST) -> str | None:
    """`torch.ops.mkldnn._x` for an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_torch(name: str, aliases: dict[str, str]) -> bool:
    """Whether `name` (through the module's import aliases) reaches a private torch name (`torch._C`,
    `torch.ops.mkldnn._x`); dunders such as `torch.__version__` are public."""
    head, _, rest = name.partition(".")
    full = ".".join(filter(None, [aliases.get(head, head), rest]))
    parts = full.split(".")
    return parts[0] == "torch" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])


def impurities(src: Path, part: str = PLAIN_PART) -> list[str]:
    """Every use under vitlab/<part>/ of what NOT_IN_PLAIN and NOT_CALLED_IN_PLAIN name, and of a
    private torch name, as "file:line: why"."""
    found = []
    for path in sorted((src / "vitlab" / part).rglob("*.py")):
        file = path.relative_to(src).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    aliases[(alias.asname or alias.name).split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for module in modules:
                root = module.split(".")[0]
                if root in NOT_IN_PLAIN:
                    found.append(f"src/{file}:{node.lineno}: imports {root}, which {NOT_IN_PLAIN[root]}")
                    break
                if private_torch(module, {}):
                    found.append(f"src/{file}:{node.lineno}: imports {module}, a private torch name")
                    break
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in NOT_CALLED_IN_PLAIN:
                found.append(
                    f"src/{file}:{node.lineno}: calls {node.func.id}, which {NOT_CALLED_IN_PLAIN[node.func.id]}"
                )
            if isinstance(node, ast.Attribute) and id(node) not in inner:  # each chain once, whole
                name = dotted(node)
                if name is not None and private_torch(name, aliases):
                    found.append(f"src/{file}:{node.lineno}: uses {name}, a private torch name")
    return sorted(set(found))


# -- the tree ------------------------------------------------------------------------------------------
@pytest.mark.unit
def test_imports_follow_the_layers():
    found = layer_violations(SRC)
    new = [f"{imp.where()}: {why}" for imp, why in found if (imp.file, imp.target) not in KNOWN_LAYER_VIOLATIONS]
    fixed = KNOWN_LAYER_VIOLATIONS - {(imp.file, imp.target) for imp, _ in found}
    assert not new, "imports against docs/architecture.md:\n" + "\n".join(new)
    assert not fixed, f"no longer violated, delete from KNOWN_LAYER_VIOLATIONS: {sorted(fixed)}"


@pytest.mark.integration
def test_no_import_cycles():
    found = cycles(SRC)
    new = [
        f"cycle {' <-> '.join(sorted(group))}:\n  " + "\n  ".join(i.where() for i in inside)
        for group, inside in found
        if group not in KNOWN_CYCLES
    ]
    fixed = KNOWN_CYCLES - {group for group, _ in found}
    assert not new, "import cycles:\n" + "\n".join(new)
    assert not fixed, f"no longer cycles, delete from KNOWN_CYCLES: {[sorted(g) for g in fixed]}"


@pytest.mark.unit
def test_no_module_is_over_the_line_limit():
    found = {file: n for file, n in long_modules(SRC).items() if file not in LONG_MODULES_ALLOWED}
    new = [f"src/{file}: {n} lines (limit {MAX_LINES})" for file, n in found.items() if file not in KNOWN_LONG_MODULES]
    fixed = KNOWN_LONG_MODULES - set(found)
    assert not new, "modules to split:\n" + "\n".join(new)
    assert not fixed, f"no longer over the limit, delete from KNOWN_LONG_MODULES: {sorted(fixed)}"


@pytest.mark.unit
def test_the_model_is_plain_pytorch():
    found = impurities(SRC)
    assert not found, "the model is plain PyTorch (docs/architecture.md):\n" + "\n".join(found)


@pytest.mark.unit
def test_every_package_has_a_layer():
    packages = {p.name for p in (SRC / "vitlab").iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(MAY_IMPORT), f"add to docs/architecture.md and MAY_IMPORT: {packages - set(MAY_IMPORT)}"
    assert set(MAY_IMPORT) <= packages, f"no such package: {set(MAY_IMPORT) - packages}"


# -- the checks themselves, on a small tree written here --------------------------------------------
def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "vitlab" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


TREE = {
    "__init__.py": "from vitlab.cli import main\n",
    "errors.py": "",
    "textfiles.py": "from .errors import ConfigError\n",
    "model/__init__.py": "from .vit import ViT\n",
    "model/vit.py": "import torch\nfrom vitlab.errors import ConfigError\nfrom . import heads\n",
    "model/heads.py": "",
    "data/__init__.py": "",
    "weights/__init__.py": "from ..model import ViT\n",
    "training/__init__.py": "",
    "cli/__init__.py": "import vitlab.training\nfrom vitlab import model\n",
}


@pytest.mark.unit
def test_a_clean_tree_passes(tmp_path):
    src = write_tree(tmp_path, TREE)
    assert layer_violations(src) == [] and cycles(src) == [] and long_modules(src) == {}


@pytest.mark.unit
@pytest.mark.parametrize(
    "file, text, why",
    [
        (
            "model/vit.py",
            "from vitlab.weights import load\n",
            "model may import the foundation and nothing, not weights",
        ),
        ("model/vit.py", "from ..data import x\n", "not data"),  # relative, two levels up
        (
            "model/vit.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vitlab.training import T\n",
            "not training",
        ),
        ("model/vit.py", "def f():\n    import vitlab.cli\n", "not cli"),
        ("data/__init__.py", "from vitlab.model.vit import ViT\n", "data may import the foundation and nothing"),
        ("weights/__init__.py", "from vitlab import __version__\n", "the public face"),
        ("errors.py", "from vitlab import textfiles\n", "vitlab.errors imports nothing"),
        ("textfiles.py", "from vitlab.model import ViT\n", "may import the foundation only"),
        ("stray/__init__.py", "from vitlab.model import ViT\n", "package vitlab.stray has no layer"),
    ],
)
def test_an_upward_import_is_named_with_file_and_line(tmp_path, file, text, why):
    src = write_tree(tmp_path, {**TREE, file: text})
    ((imp, reason),) = layer_violations(src)
    assert imp.file == f"vitlab/{file}" and imp.line == text.count("\n") and why in reason
    assert imp.text == text.strip().splitlines()[-1].strip()


@pytest.mark.unit
def test_a_cycle_is_named_with_its_modules(tmp_path):
    src = write_tree(tmp_path, {**TREE, "model/heads.py": "from vitlab.model.vit import ViT\n"})
    ((group, inside),) = cycles(src)
    assert group == {"vitlab.model.vit", "vitlab.model.heads"}
    assert sorted(i.where() for i in inside) == [
        "src/vitlab/model/heads.py:1: `from vitlab.model.vit import ViT`",
        "src/vitlab/model/vit.py:3: `from . import heads`",
    ]


@pytest.mark.unit
def test_a_long_module_is_named(tmp_path):
    src = write_tree(tmp_path, {**TREE, "model/heads.py": "x = 1\n" * (MAX_LINES + 1)})
    assert long_modules(src) == {"vitlab/model/heads.py": MAX_LINES + 1}


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, why",
    [
        ("import subprocess\n", "imports subprocess, which runs a process"),
        ("import ctypes\n", "imports ctypes, which loads native code"),
        ("from pathlib import Path\n", "imports pathlib, which reaches files"),
        ("def f(p):\n    return open(p, 'w')\n", "calls open, which opens a file"),
        ("import torch\nx = torch._softmax\n", "uses torch._softmax, a private torch name"),
        ("import torch\ny = torch.ops.mkldnn._linear_pointwise(1)\n", "uses torch.ops.mkldnn._linear_pointwise"),
        ("import torch.nn.functional as F\nz = F._canonical_mask\n", "uses F._canonical_mask, a private torch name"),
        ("from torch._inductor import config\n", "imports torch._inductor, a private torch name"),
    ],
)
def test_an_impurity_in_the_model_is_named_with_file_and_line(tmp_path, text, why):
    src = write_tree(tmp_path, {**TREE, "model/heads.py": text})
    found = impurities(src)
    assert found and all(f.startswith("src/vitlab/model/heads.py:") for f in found)
    assert any(why in f for f in found), found


@pytest.mark.unit
def test_public_torch_names_and_dunders_are_plain(tmp_path):
    text = "import torch\nfrom torch import nn\nx = torch.__version__\ny = nn.functional.gelu\nz = torch.compiler.is_compiling\n"
    assert impurities(write_tree(tmp_path, {**TREE, "model/heads.py": text})) == []
