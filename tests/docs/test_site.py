"""The docs site, built as ``.ci/run`` builds it (``mkdocs build --strict``), says what its
sources say: the API page shows no reST role as text and links what it cross-references (the
griffe extension ``tools/griffe_docs.py``), lists the stores' methods with their contracts;
the install and quick-start pages are the README's own sections, RELIABILITY.md is a page,
and nothing links to the project URLs that do not exist.
"""

from __future__ import annotations

import html
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from redis_session.protocols import ChildSessionStore, Store

ROOT = Path(__file__).resolve().parents[2]
RAW_ROLE = re.compile(r":(?:py:)?(?:class|meth|attr|func|mod|data|exc|obj|const):(?:`|<code>)")
DEAD_URL = "github.com/redis-session"  # the project URLs used to point there: it does not exist
OUTSIDE = {"bench.harness"}  # role targets outside the package: shown as code, no link


def griffe_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("griffe_docs", ROOT / "tools" / "griffe_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def text_of(markup: str) -> str:
    """The text a reader sees, whitespace collapsed (for comparing with Markdown sources)."""
    main = markup[markup.find("<article") : markup.find("</article>")]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", main)).split())


def markdown_text(markdown: str) -> str:
    """Markdown as text: no fences, markers, code spans' backticks or emphasis."""
    lines = [line for line in markdown.splitlines() if not line.startswith(("```", "<!--"))]
    return " ".join(re.sub(r"`|\*\*", "", "\n".join(lines)).split())


def readme_section(name: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(
        rf"--8<-- \[start:{name}\] -->\n(.*?)<!-- --8<-- \[end:{name}\]", readme, re.S
    )
    assert found is not None, f"README.md has no section marked {name}"
    return found.group(1)


def test_no_page_shows_a_rest_role_as_text(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 15
    left = {p.relative_to(site): RAW_ROLE.findall(p.read_text(encoding="utf-8")) for p in pages}
    assert not {p: roles for p, roles in left.items() if roles}


def test_a_reference_to_a_public_object_is_a_link(site: Path) -> None:
    """A reference the site cannot link (autorefs prints it as ``<span title=...>``) names an
    object outside the package or a private one (a module or name with a leading ``_``)."""
    api = page(site, "api")
    unlinked = set(re.findall(r'<span title="(redis_session\.[^"]+)">', api))
    public = {i for i in unlinked if not any(p.startswith("_") for p in i.split("."))}
    assert not public
    assert api.count('class="autorefs autorefs-internal"') > 200
    for target in ("redis_session.store.RedisStore", "redis_session.options.StoreOptions"):
        assert f'href="#{target}"' in api


@pytest.mark.parametrize("store", ["store.RedisStore", "aio.AsyncRedisStore"])
def test_the_stores_list_their_methods_with_their_contract(site: Path, store: str) -> None:
    """The stores' methods take their docstrings from the protocols at import (``docs_from``);
    the API page lists them under the stores with those docstrings."""
    api = page(site, "api")
    for method in ("create", "get", "append_message", "fork_child"):
        contract = getattr(Store if method != "fork_child" else ChildSessionStore, method)
        summary = inspect.getdoc(contract).splitlines()[0]  # type: ignore[union-attr]
        start = api.find(f'id="redis_session.{store}.{method}"')
        assert start > 0, f"{store}.{method} is not on the page"
        body = text_of(f"<article>{api[start : api.find('doc-heading', start + 80)]}</article>")
        assert markdown_text(summary) in body, (method, body[:300])


def test_install_and_quick_start_are_the_readmes_sections(site: Path) -> None:
    install, quickstart = text_of(page(site, "install")), text_of(page(site, "quickstart"))
    assert markdown_text(readme_section("install")) in install
    assert markdown_text(readme_section("start")) in quickstart
    assert markdown_text(readme_section("quickstart")) in quickstart
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="install/"' in home and 'href="quickstart/"' in home


def test_the_readmes_first_bash_block_is_still_the_ci_lines() -> None:
    """The markers sit around the README's opening block, not inside it (``.ci/run`` runs its
    two lines; ``tests/packaging/test_ci.py`` holds their shape)."""
    block = re.search(r"^```bash\n(.*?)^```$", readme_section("start"), re.M | re.S)
    assert block is not None and len(block.group(1).splitlines()) == 2


def test_reliability_md_is_a_page_linked_relatively(site: Path) -> None:
    report = (ROOT / "RELIABILITY.md").read_text(encoding="utf-8")
    title = report.splitlines()[0].lstrip("# ")
    row = next(line for line in report.splitlines() if line.startswith("| server frozen"))
    reliability = text_of(page(site, "reliability"))
    assert title in reliability
    assert markdown_text(" ".join(row.strip("|").split("|"))) in reliability
    for linking in ("production", "encryption"):
        assert 'href="../reliability/"' in page(site, linking)


def test_nothing_links_to_project_urls_that_do_not_exist(site: Path) -> None:
    sources = [ROOT / "README.md", ROOT / "mkdocs.yml", ROOT / "pyproject.toml"]
    sources += sorted((ROOT / "docs").glob("*.md")) + sorted(site.rglob("*.html"))
    assert [p for p in sources if DEAD_URL in p.read_text(encoding="utf-8")] == []


def test_roles_become_references() -> None:
    docs = griffe_docs()
    paths = {"Store": "pkg.protocols.Store", "pkg.RedisStore": "pkg.store.RedisStore"}

    def convert(text: str) -> str:
        converted: str = docs.convert_roles(text, paths.get)
        return converted

    assert convert("see :class:`Store`.") == (
        'see <autoref identifier="pkg.protocols.Store" optional><code>Store</code></autoref>.'
    )
    assert convert(":class:`~pkg.RedisStore`") == (
        '<autoref identifier="pkg.store.RedisStore" optional><code>RedisStore</code></autoref>'
    )
    assert convert(":meth:`the store <pkg.RedisStore>`").endswith(
        "<code>the store</code></autoref>"
    )
    assert convert(":mod:`bench.harness` and :py:func:`nowhere`") == (
        "`bench.harness` and `nowhere`"
    )
    assert convert("``newbie:x:`` :data:``") == "``newbie:x:`` :data:``"
    assert convert("```\n:class:`Store`\n```\n") == "```\n:class:`Store`\n```\n"


def test_literal_markers_become_markdown() -> None:
    docs = griffe_docs()
    assert docs.convert_literal_markers("Like this::\n\n    a -> b") == "Like this:\n\n    a -> b"
    assert docs.convert_literal_markers("Like this ::\n\n    a") == "Like this\n\n    a"
    assert docs.convert_literal_markers("::\n\n    a") == "\n\n    a"
    assert docs.convert_literal_markers("Not a block::\nnext") == "Not a block::\nnext"


def test_every_role_of_the_package_resolves() -> None:
    """Every role in every docstring of the package names an object of the package (or one
    of ``OUTSIDE``), and none is left once the extension ran."""
    import griffe

    docs = griffe_docs()
    plain = griffe.load("redis_session", search_paths=[str(ROOT)])
    objects = list(docs.walk(plain))
    by_name: dict[str, list[str]] = defaultdict(list)
    for obj in objects:
        by_name[obj.name].append(obj.path)
    roles = 0
    missing = set()
    for obj in objects:
        resolve = docs.resolver(obj, plain, by_name)
        for match in docs.ROLE.finditer(obj.docstring.value if obj.docstring else ""):
            roles += 1
            target = re.sub(r"^.*<(.+)>$", r"\1", match["text"]).lstrip("~")
            if resolve(target) is None:
                missing.add(target)
    assert roles > 150
    assert missing == OUTSIDE

    loader: Any = griffe.load(
        "redis_session",
        search_paths=[str(ROOT)],
        extensions=griffe.load_extensions(docs.DocsExtension()),
    )
    left = [
        o.path for o in docs.walk(loader) if o.docstring and docs.ROLE.search(o.docstring.value)
    ]
    assert left == []
    create = loader["store"]["RedisStore"]["create"].docstring
    assert create is not None
    assert create.value == loader["protocols"]["Store"]["create"].docstring.value
