"""The docs site's griffe extension (``mkdocs.yml``: mkdocstrings' ``extensions``): the API page
shows the docstrings as ``help()`` does, with their cross-references as links.

- ``docs_from``: a class decorated with ``redis_session.protocols.docs_from(A, B)`` (or passed
  to ``docs_from(A)(C)``) takes, at import, the docstring of the same method of ``A`` or ``B``
  for each method it leaves undocumented. Griffe reads the source, not the imported classes, so
  it saw those methods without docstrings (the API page left them out); here they get the
  same docstrings as at run time.
- reST roles: the docstrings cross-reference with Sphinx's roles (``:class:`Store```,
  ``:meth:`~RedisAgentSession.close```, ``:mod:`.sessions```, ``:func:`title <target>```),
  which Markdown prints as text. Each becomes an autorefs reference to the object it names,
  resolved as Sphinx does (the docstring's scope, then its module, then relative to its
  package, then the package's top level, then a unique name in the package). A reference is
  ``optional``: when its target is not on the site (a private module), it is printed as code
  without a link and without a warning; a target that does not resolve is printed as code.
- reST literal blocks: a paragraph ending in ``::`` before an indented block ends in ``:``
  (Markdown shows the indented block as code already, and would print the ``::``).
"""

from __future__ import annotations

import ast
import html
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from griffe import Alias, Docstring, Extension, GriffeLoader, Module, NameResolutionError, Object

DOCS_FROM = "redis_session.protocols.docs_from"
ROLE = re.compile(
    r"(?<![\w`:]):(?:py:)?(?P<role>class|meth|attr|func|mod|data|exc|obj|const):"
    r"`(?P<text>[^`]+)`(?!`)"
)
EXPLICIT = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
FENCE = re.compile(r"^\s*(```|~~~)")

Resolver = Callable[[str], str | None]


def convert_roles(text: str, resolve: Resolver) -> str:
    """``text`` with each reST role replaced: ``<autoref identifier="path" optional>`` around
    the role's text as code when ``resolve(target)`` gives a path, the text as code otherwise.
    Fenced code blocks are left as they are.
    """
    out: list[str] = []
    fenced = False
    for line in text.splitlines(keepends=True):
        if FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else ROLE.sub(lambda m: _reference(m, resolve), line))
    return "".join(out)


def convert_literal_markers(text: str) -> str:
    """``text`` with reST's ``::`` before an indented literal block as Markdown has it: ``:``
    (``text ::`` and a lone ``::`` leave nothing).
    """
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.rstrip().endswith("::"):
            continue
        following = next((n for n in lines[i + 1 :] if n.strip()), None)
        indent = len(line) - len(line.lstrip())
        if following is None or len(following) - len(following.lstrip()) <= indent:
            continue
        stripped = line.rstrip()[:-2]
        lines[i] = (
            stripped.rstrip()
            if stripped.endswith((" ", "\t")) or not stripped.strip()
            else f"{stripped}:"
        )
    return "\n".join(lines)


def _reference(match: re.Match[str], resolve: Resolver) -> str:
    text = match["text"].strip()
    explicit = EXPLICIT.match(text)
    if explicit:
        title, target = explicit["title"], explicit["target"].strip()
    else:
        target = text
        title = text.lstrip("~")
        if text.startswith("~"):
            title = title.rsplit(".", 1)[-1]
    target = target.lstrip("~")
    path = resolve(target)
    if path is None:
        return f"`{title}`"
    code = f"<code>{html.escape(title)}</code>"
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def resolver(obj: Object, package: Module, by_name: dict[str, list[str]]) -> Resolver:
    """How a role target in ``obj``'s docstring resolves to the path of an object of
    ``package`` (``None`` when it names nothing there).
    """

    def resolve(target: str) -> str | None:
        for path in _candidates(target, obj, package, by_name):
            found = _lookup(package, path)
            if found is not None:
                return found
        return None

    return resolve


def _candidates(
    target: str, obj: Object, package: Module, by_name: dict[str, list[str]]
) -> Iterator[str]:
    module = obj if obj.is_module else obj.module
    if target.startswith("."):
        dots = len(target) - len(target.lstrip("."))
        base: Object = module if module.is_init_module else module.parent or module
        for _ in range(dots - 1):
            base = base.parent or base
        yield f"{base.path}.{target[dots:]}"
        return
    head, _, rest = target.partition(".")
    try:
        scoped = obj.resolve(head)
    except NameResolutionError:
        pass
    else:
        yield f"{scoped}.{rest}" if rest else scoped
    yield target
    yield f"{package.path}.{target}"
    paths = by_name.get(head, [])
    if len(paths) == 1:
        yield f"{paths[0]}.{rest}" if rest else paths[0]


def _lookup(package: Module, path: str) -> str | None:
    """The canonical path of the object at ``path`` inside ``package``, if there is one."""
    if path != package.path and not path.startswith(f"{package.path}."):
        return None
    parts = path.split(".")[1:]
    found: Object | Alias = package
    try:
        for part in parts:
            member = found.members.get(part)
            if member is None:
                return None
            found = member
        if isinstance(found, Alias):
            target_path = found.target_path
            if not target_path.startswith(f"{package.path}."):
                return None
            return _lookup(package, target_path)
        return found.canonical_path
    except Exception:  # an alias griffe cannot follow: no link, rather than a failed build
        return None


def walk(obj: Object) -> Iterator[Object]:
    """``obj`` and every object defined under it (imports, which are aliases, excluded)."""
    yield obj
    for member in obj.members.values():
        if not isinstance(member, Alias):
            yield from walk(member)


def _docs_from_calls(tree: ast.Module) -> Iterator[tuple[str, list[str], str]]:
    """``(class name, source names, decorator name)`` of each ``@docs_from(...)`` class and
    ``docs_from(...)(Class)`` statement at the top level of ``tree``.
    """
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name):
                    yield node.name, _names(decorator.args), decorator.func.id
        elif (
            isinstance(node, ast.Expr)
            and isinstance(call := node.value, ast.Call)
            and isinstance(inner := call.func, ast.Call)
            and isinstance(inner.func, ast.Name)
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Name)
        ):
            yield call.args[0].id, _names(inner.args), inner.func.id


def _names(args: list[ast.expr]) -> list[str]:
    return [a.id for a in args if isinstance(a, ast.Name)]


class DocsExtension(Extension):
    """Griffe extension: ``docs_from`` docstrings, then reST roles as autorefs references."""

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[str, list[tuple[str, list[str], str]]] = {}

    def on_module_instance(self, *, node: Any, mod: Module, **kwargs: Any) -> None:
        """Note the module's ``docs_from`` calls (resolved once the package is loaded)."""
        if isinstance(node, ast.Module):
            self._calls[mod.path] = list(_docs_from_calls(node))

    def on_package(self, *, pkg: Module, loader: GriffeLoader, **kwargs: Any) -> None:
        """Give the stores their protocol's docstrings, then convert every docstring's roles."""
        apply_docs_from(pkg, self._calls)
        convert_package(pkg)


def apply_docs_from(pkg: Module, calls: dict[str, list[tuple[str, list[str], str]]]) -> None:
    """What ``docs_from`` does at import, on griffe's objects of ``pkg``."""
    sources: dict[str, list[str]] = {}
    for module_path, found in calls.items():
        module = _lookup_object(pkg, module_path)
        if not isinstance(module, Module):
            continue
        for target, names, decorator in found:
            if _resolve(module, decorator) != DOCS_FROM:
                continue
            target_path = _resolve(module, target)
            if target_path is not None:
                paths = [p for p in (_resolve(module, n) for n in names) if p is not None]
                sources.setdefault(target_path, []).extend(paths)
    done: set[str] = set()

    def apply(path: str) -> None:
        if path in done:
            return
        done.add(path)
        cls = _lookup_object(pkg, path)
        if cls is None or not cls.is_class:
            return
        for source_path in sources.get(path, []):
            apply(source_path)
        for member in cls.members.values():
            if isinstance(member, Alias) or not member.is_function or member.docstring:
                continue
            if "property" in member.labels:
                continue
            for source_path in sources.get(path, []):
                source = _lookup_object(pkg, source_path)
                doc = source.all_members.get(member.name) if source is not None else None
                if doc is not None and not isinstance(doc, Alias) and doc.docstring:
                    member.docstring = Docstring(
                        doc.docstring.value,
                        lineno=doc.docstring.lineno,
                        endlineno=doc.docstring.endlineno,
                        parent=member,
                        parser=doc.docstring.parser,
                        parser_options=doc.docstring.parser_options,
                    )
                    break

    for path in sources:
        apply(path)


def convert_package(pkg: Module) -> int:
    """Convert the roles and literal markers of every docstring under ``pkg``; the number of
    roles converted.
    """
    objects = list(walk(pkg))
    by_name: dict[str, list[str]] = defaultdict(list)
    for obj in objects:
        by_name[obj.name].append(obj.path)
    converted = 0
    for obj in objects:
        if obj.docstring is None:
            continue
        value = obj.docstring.value
        count = len(ROLE.findall(value))
        obj.docstring.value = convert_roles(
            convert_literal_markers(value), resolver(obj, pkg, by_name)
        )
        converted += count
    return converted


def _resolve(module: Module, name: str) -> str | None:
    try:
        return module.resolve(name)
    except NameResolutionError:
        return None


def _lookup_object(pkg: Module, path: str) -> Object | None:
    canonical = _lookup(pkg, path)
    if canonical is None:
        return None
    found: Object | Alias = pkg
    for part in canonical.split(".")[1:]:
        found = found.members[part]
    return found if not isinstance(found, Alias) else None
