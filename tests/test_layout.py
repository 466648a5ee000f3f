"""The layout's rules, checked by reading the source (ast), so they stay true:

- imports flow one way: no cycle between modules of the package (imports inside
  functions count: a lazy import is still a dependency; so do imports made only for
  the type checker: a part of the Vault is typed against a narrow protocol, never
  against the Vault that owns it);
- only agent/llm talks to the model: calls `client.messages...`; only
  agent/llm/anthropic.py imports the `anthropic` SDK, only agent/llm/openai.py the
  `openai` SDK;
- no vendor's dialect above the seam: the Messages API's block and field names
  (`tool_use`, `tool_result`, `tool_use_id`, `cache_control`, `input_schema`) are
  strings only in agent/llm/anthropic.py and agent/llm/openai.py (each the home of its
  wire format) and in agent/stores/sessions.py (the session files' stored shape);
- the packages are ranked (shared/DESIGN.md section 7, RANKS below) and a package imports
  only from lower ranks: no import from a lower rank to a higher one, nor between two
  packages of the same rank;
- only agent/vault runs git: no `git` command run by subprocess, no GitPython import
  elsewhere, and no `.git(...)` call but from agent/sync, which drives git through the
  vault's runner;
- nothing imports the CLI layer (agent.cli) but agent/__main__.py;
- only agent/serve/channels/telegram.py uses the Telegram library (python-telegram-bot);
- the stores (file formats) import nothing from the layers above them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from helpers import today_lines

PACKAGE = Path(__file__).resolve().parent.parent / "agent"

# The ranks of shared/DESIGN.md section 7, lowest first. Base (0-3) holds what knows nothing
# of the vault: errors; the clock, the package's data, files (the one safe reader,
# atomic writes, the off-limits paths), schedules (durations, times, next_run) and the
# sandbox; agent.toml's reader; the secrets scanner, which reads its allowlist there and
# which the vault's commits consult.
RANKS = {
    "agent": 0, "agent.errors": 0,
    "agent.clock": 1, "agent.oneline": 1, "agent.schemas": 1, "agent.package": 1, "agent.fs": 1, "agent.schedule": 1, "agent.sandbox": 1,
    "agent.prices": 1,
    # The model seam's records (messages, blocks, usage): plain data that imports nothing,
    # which both the model (agent/llm) and the session store read and write.
    "agent.llm.records": 1,
    "agent.config": 2,
    "agent.redact": 3,
    "agent.vault": 4,                          # git, and only git
    "agent.stores": 5, "agent.llm": 5,         # file formats; the model
    "agent.search": 6, "agent.dream": 6,
    "agent.chat": 7, "agent.sync": 7,          # chat's tools include the MCP client
    "agent.ops": 8,                            # every operation a front-end offers
    "agent.cli": 9, "agent.serve": 9, "agent.mcp_server": 9,   # front-ends
    "agent.__main__": 10,                      # `python -m agent`: the CLI
}
# The CLI wires the other front-ends: `agent serve`, `agent mcp`.
FRONT_ENDS_THE_CLI_STARTS = ("agent.serve", "agent.mcp_server")


def package_of(name: str) -> str:
    """The ranked package a module belongs to (agent.sync.held -> agent.sync)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in RANKS:
            return ".".join(parts[:n])
    raise KeyError(name)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, tuple[Path, ast.Module]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        out[module_name(path)] = (path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return out


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"


def imports(name: str) -> list[tuple[str, ast.AST]]:
    """(imported module, node) for every import in a module, at any depth; a name taken
    from a package counts as its submodule when there is one."""
    path, tree = modules()[name]
    known = modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in known else base, node))
    return out


def internal_edges() -> dict[str, set[str]]:
    """Which modules each module imports: at the top, inside a function, or only for the
    type checker (`if TYPE_CHECKING:`): a part annotated with the class that owns it
    still needs that class to be read, so it counts."""
    known = modules()
    return {name: {m for m, _ in imports(name) if m in known and m != name} for name in known}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_rules_see_the_package():
    names = set(modules())
    assert {"agent.vault.repo", "agent.stores.sessions", "agent.llm.anthropic",
            "agent.cli.app", "agent.search.index", "agent.serve.loop"} <= names
    edges = internal_edges()
    assert "agent.stores.sessions" in edges["agent.search.documents"]
    # An import made only for the type checker is an edge too (branches.py imports the
    # Vault under `if TYPE_CHECKING:`).
    assert "agent.vault.repo" in edges["agent.vault.branches"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_modules():
    found = cycles(internal_edges())
    assert not found, "import cycles (lazy and typing-only imports count):\n" + "\n".join(
        " <-> ".join(c) for c in found)


# Each vendor's SDK and the one module that may import it: the two model providers'
# (everything above the seam speaks its records) and Telegram's (python-telegram-bot,
# whose objects the channel turns into the router's messages).
SDK_HOMES = {"anthropic": "agent.llm.anthropic", "openai": "agent.llm.openai",
             "telegram": "agent.serve.channels.telegram"}


def test_each_vendor_sdk_is_imported_by_its_one_module():
    problems = []
    for name in modules():
        for m, node in imports(name):
            sdk = m.split(".")[0]
            if sdk in SDK_HOMES and name != SDK_HOMES[sdk]:
                problems.append(f"{where(modules()[name][0], node)}: imports {m}")
    assert not problems, "\n".join(problems)
    for sdk, home in SDK_HOMES.items():
        assert any(m.split(".")[0] == sdk for m, _ in imports(home)), home


# The Messages API's names, which the seam's records replace above it, and the modules
# where they may be strings; the same for chat completions' names.
DIALECT = ("tool_use", "tool_result", "tool_use_id", "cache_control", "input_schema")
DIALECT_HOMES = ("agent.llm.anthropic", "agent.llm.openai", "agent.stores.sessions")
OPENAI_DIALECT = ("tool_call_id", "image_url", "finish_reason", "max_completion_tokens",
                  "prompt_tokens", "completion_tokens")


def dialect_strings(tree: ast.AST, words: tuple[str, ...] = DIALECT) -> list[tuple[ast.AST, str]]:
    """(node, word) for each string (docstrings aside) that holds one of `words` as a
    word."""
    import re
    pattern = re.compile(r"\b(" + "|".join(words) + r")\b")
    docstrings = {id(n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(node, found.group(1)) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and (found := pattern.search(node.value))]


def test_no_vendor_dialect_above_the_seam():
    problems = []
    for name, (path, tree) in modules().items():
        if name not in DIALECT_HOMES:
            problems += [f"{where(path, node)}: the string {word!r}"
                         for node, word in dialect_strings(tree)]
        if name != "agent.llm.openai":
            problems += [f"{where(path, node)}: the string {word!r}"
                         for node, word in dialect_strings(tree, OPENAI_DIALECT)]
    assert not problems, "\n".join(problems)
    # The rule sees a name wherever a string holds it, and not in a docstring.
    tree = ast.parse('"""About tool_use."""\nx = {"type": "tool_use"}\ny = f"{x}cache_control"\n')
    assert [w for _, w in dialect_strings(tree)] == ["tool_use", "cache_control"]
    assert dialect_strings(modules()["agent.llm.anthropic"][1])
    assert dialect_strings(modules()["agent.stores.sessions"][1])
    assert dialect_strings(modules()["agent.llm.openai"][1], OPENAI_DIALECT)


# The product's files, which the vault is told about (agent.vault.layout) and never names:
# the formats' own files, their merge drivers, the search index.
PRODUCT_FILES = ("cron.json", ".forgotten", ".dream_cursor", ".dream_ledger", ".dream_rejected",
                 "MEMORY.md", "USER.md", "index.sqlite", "agent-facts", "agent-lines",
                 "agent-cron", "agent-set", "mergedriver")
# A journal of an older version does not name the file its rewrite added.
NAMED_FOR_OLD_JOURNALS = {("agent.vault.rewrite_journal", ".forgotten")}


def test_the_vault_names_none_of_the_products_files():
    problems = []
    for name, (path, tree) in modules().items():
        if not name.startswith("agent.vault."):
            continue
        docstrings = {id(n.value) for n in ast.walk(tree)
                      if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings:
                problems += [f"{where(path, node)}: names {f}" for f in PRODUCT_FILES
                             if f in node.value and (name, f) not in NAMED_FOR_OLD_JOURNALS]
    assert not problems, "\n".join(problems)


def test_only_agent_llm_talks_to_the_model():
    problems = []
    for name, (path, tree) in modules().items():
        if name == "agent.llm" or name.startswith("agent.llm."):
            continue
        for node in ast.walk(tree):
            # client.messages.create(...), .stream(...), .count_tokens(...), .batches...
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "messages" and node.attr in (
                        "create", "stream", "count_tokens", "batches"):
                problems.append(f"{where(path, node)}: calls .messages.{node.attr}")
    assert not problems, "\n".join(problems)


def _runs_git(node: ast.Call) -> bool:
    """subprocess.run(["git", ...]) and the like: a command list or string starting with git."""
    if not node.args:
        return False
    first = node.args[0]
    if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
        head = first.elts[0]
        return isinstance(head, ast.Constant) and head.value == "git"
    return isinstance(first, ast.Constant) and isinstance(first.value, str) \
        and first.value.split(" ", 1)[0] == "git"


def test_only_agent_vault_runs_git():
    problems = []
    for name, (path, tree) in modules().items():
        if name == "agent.vault" or name.startswith("agent.vault."):
            continue
        problems += [f"{where(path, node)}: imports GitPython ({m})" for m, node in imports(name)
                     if m == "git" or m.startswith("git.")]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "git" \
                    and not name.startswith("agent.sync."):
                problems.append(f"{where(path, node)}: calls .git(...)")
            elif isinstance(f, ast.Attribute) and f.attr in (
                    "run", "Popen", "call", "check_call", "check_output") and _runs_git(node):
                problems.append(f"{where(path, node)}: runs git with subprocess")
    assert not problems, "\n".join(problems)


def test_only_the_git_runner_starts_git():
    """Every git process starts in agent/vault/git.py, so each runs with hooks, filter
    drivers and fsmonitor off (sync's own calls once skipped the filters)."""
    problems = []
    for name, (path, tree) in modules().items():
        if name == "agent.vault.git":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("run", "Popen", "call", "check_call",
                                           "check_output") and _runs_git(node):
                problems.append(f"{where(path, node)}: starts git, not through agent.vault.git")
    assert not problems, "\n".join(problems)


def test_nothing_imports_the_cli_but_main():
    problems = []
    for name, (path, _) in modules().items():
        if name in ("agent.__main__", "agent.cli") or name.startswith("agent.cli."):
            continue
        problems += [f"{where(path, node)}: imports {m}" for m, node in imports(name)
                     if m == "agent.cli" or m.startswith("agent.cli.")]
    assert not problems, "\n".join(problems)


def test_every_module_has_a_rank():
    unranked = []
    for name in modules():
        try:
            package_of(name)
        except KeyError:
            unranked.append(name)
    assert not unranked, f"modules with no rank in RANKS: {unranked}"


@pytest.mark.parametrize("package", sorted(RANKS))
def test_a_package_imports_only_from_lower_ranks(package):
    problems = []
    for name, (path, _) in modules().items():
        if package_of(name) != package:
            continue
        for m, node in imports(name):
            if m not in modules():
                continue                       # the standard library or a dependency
            other = package_of(m)
            if other == package or RANKS[other] < RANKS[package]:
                continue
            if package == "agent.cli" and other in FRONT_ENDS_THE_CLI_STARTS:
                continue
            problems.append(f"{where(path, node)}: imports {m} "
                            f"(rank {RANKS[other]}, from rank {RANKS[package]})")
    assert not problems, "\n".join(problems)


def test_the_rank_rule_catches_an_import_upward():
    # The rule itself: a lower rank importing a higher one is refused, the other way not.
    assert RANKS[package_of("agent.vault.repo")] < RANKS[package_of("agent.stores.cronfile")]
    assert RANKS[package_of("agent.fs.safe")] < RANKS[package_of("agent.vault.repo")]
    assert package_of("agent.serve.channels.telegram") == "agent.serve"


@pytest.mark.parametrize("store", sorted(n for n in modules() if n.startswith("agent.stores.")))
def test_stores_know_nothing_of_git(store):
    path, _ = modules()[store]
    problems = [f"{where(path, node)}: imports {m}" for m, node in imports(store)
                if m in modules() and package_of(m) == "agent.vault"]
    assert not problems, "\n".join(problems)


def test_a_note_imports_no_other_command_family(vault):
    code = ("import sys; from agent.cli import main; sys.argv = ['agent', 'note', 'quick']\n"
            "try: main()\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('agent.cli.', 'anthropic', "
            "'agent.search', 'agent.chat'))))")
    p = subprocess.run([sys.executable, "-c", code], cwd=vault.root, capture_output=True,
                       text=True, env={**os.environ, "AGENT_VAULT": str(vault.root)})
    assert p.returncode == 0, p.stderr
    # agent.cli.topics is the help's table of topics and examples: data, no command family
    assert p.stdout.strip().splitlines()[-1] == ("['agent.cli.app', 'agent.cli.common', "
                                                 "'agent.cli.topics']")
    assert "quick" in today_lines(vault)


# Methods the frameworks call by name (click's Group), never named in our code.
CALLED_BY_NAME = {"format_commands"}


def test_no_function_is_left_that_nothing_calls():
    """A function of the package, not decorated (a command, a tool, a hook registered by
    decorator), whose name appears nowhere else in the package, its tests or scripts:
    dead code that a reader would take for a path the program takes."""
    import re
    from collections import Counter

    root = PACKAGE.parent
    names: Counter = Counter()
    for folder in ("agent", "tests", "scripts"):
        for path in (root / folder).rglob("*.py"):
            names.update(re.findall(r"[A-Za-z_]\w*", path.read_text(encoding="utf-8")))
    names.update(re.findall(r"[A-Za-z_]\w*", (root / "pyproject.toml").read_text()))
    dead = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs = [(n.name, n) for n in tree.body if hasattr(n, "name")]
        defs += [(f"{c.name}.{m.name}", m) for c in tree.body if isinstance(c, ast.ClassDef)
                 for m in c.body if hasattr(m, "name")]
        for name, node in defs:
            short = name.rsplit(".", 1)[-1]
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not node.decorator_list and not short.startswith("__")
                    and short not in CALLED_BY_NAME and names[short] <= 1):
                dead.append(f"{module_name(path)}.{name}")
    assert dead == []
