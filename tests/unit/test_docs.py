"""The docs that state a contract, checked against the code.

The README is an index that fits on a screen or two; everything else is a page of docs/, each
reachable from the README in one link. Where a page states what the code does by name (the
annotation and label names, the make targets, the metrics, the scheduler's permissions, the
supported Kubernetes versions, the config fields and chart values they name, the README's
simulate example),
this module holds the page and the code to the same list, so that neither can drift alone. Every
link of the README and of docs/ must lead to a file that exists and, for a markdown page, to a
heading it has (GitHub's anchors). The pod book's table (docs/architecture.md) is checked by
test_podbook_table.py, the agent's configuration example (docs/agent.md) by test_agent_cli.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics_core import Metric

from scheduler.cli import main
from scheduler.core.model import names
from scheduler.service.metrics import Metrics

REPO = Path(__file__).parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# The README is read by someone deciding whether to use the project: about 200 lines.
README_MAX_LINES = 250
# Link targets that are not files of this repository.
EXTERNAL = ("http://", "https://", "mailto:")
# model/names.py constants that are values of a name, not names: the sGPU QoS row lists them.
QOS_VALUES = ("SGPU_QOS_POLICIES", "DEFAULT_SGPU_QOS")


def prose(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield line


def code(text: str) -> Iterator[str]:
    """The lines inside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            yield line


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped but hyphens and underscores,
    spaces to hyphens; a repeated heading gets -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(page.read_text()):
        m = re.match(r"#{1,6} (.+)", line)
        if m is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [
        m.group(1)
        for line in prose(page.read_text())
        for m in re.finditer(r"\]\(([^)\s]+)\)", line)
        if not m.group(1).startswith(EXTERNAL)
    ]


def section(page: Path, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of that level or above."""
    lines = page.read_text().splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"#{1,2} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def first_column(text: str) -> list[str]:
    """The first cell of every body row of the markdown tables in ``text`` (a table's header is
    the row above its ``|---|`` line)."""
    lines = text.splitlines()
    cells = []
    for i, line in enumerate(lines):
        below = lines[i + 1] if i + 1 < len(lines) else ""
        if not line.startswith("|") or line.startswith("|-") or below.startswith("|-"):
            continue
        cells.append(line.split("|")[1].strip())
    return cells


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_every_docs_page_is_one_link_from_the_readme() -> None:
    linked = {(REPO / target.split("#")[0]).resolve() for target in links(README)}
    assert {page.resolve() for page in PAGES} <= linked


def test_every_link_leads_to_a_file_and_a_heading() -> None:
    broken = []
    for page in [README, *PAGES]:
        for target in links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.name}: {target}: no such heading")
    assert broken == []


def names_in_code() -> set[str]:
    """Every name model/names.py spells: its string constants and tuples of strings."""
    found: set[str] = set()
    for constant, value in vars(names).items():
        if not constant.isupper() or constant in QOS_VALUES:
            continue
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, tuple):
            found.update(value)
    return found


def test_annotations_page_lists_exactly_the_names_of_names_py() -> None:
    table = section(DOCS / "annotations.md", "Every name")
    documented = [cell.strip("`") for cell in first_column(table)]
    assert len(documented) == len(set(documented)), "a name is listed twice"
    assert set(documented) == names_in_code()


def test_the_sgpu_qos_row_lists_every_policy_and_the_default() -> None:
    table = section(DOCS / "annotations.md", "Every name")
    row = next(r for r in table.splitlines() if r.startswith(f"| `{names.SGPU_QOS_ANNOTATION}`"))
    for policy in names.SGPU_QOS_POLICIES:
        assert f"`{policy}`" in row
    assert f"default `{names.DEFAULT_SGPU_QOS}`" in row


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*)\s*:(?!=)", text, re.MULTILINE))


def test_development_page_lists_exactly_the_makefile_targets() -> None:
    table = section(DOCS / "development.md", "Make targets")
    documented = {t for cell in first_column(table) for t in re.findall(r"`make ([\w-]+)`", cell)}
    assert documented == makefile_targets()


def test_every_make_command_in_the_docs_is_a_target() -> None:
    targets = makefile_targets()
    unknown = []
    for page in [README, *PAGES]:
        text = page.read_text()
        said = re.findall(r"`make ([\w-]+)(?![\w*-])", "\n".join(prose(text)))
        said += [m.group(1) for line in code(text) if (m := re.match(r"\s*make ([\w-]+)", line))]
        unknown += [f"{page.name}: make {t}" for t in said if t not in targets]
    assert unknown == []


def exported_metrics() -> set[str]:
    """What /metrics exposes: a counter's samples carry ``_total``."""
    families: list[Metric] = list(Metrics().registry.collect())
    return {f.name + "_total" if f.type == "counter" else f.name for f in families}


def test_operations_page_lists_exactly_the_exported_metrics() -> None:
    table = section(DOCS / "operations.md", "Health, metrics, debug and logs")
    documented = [cell.strip("`") for cell in first_column(table)]
    assert len(documented) == len(set(documented)), "a metric is listed twice"
    assert set(documented) == exported_metrics()


def test_supported_versions_name_the_version_every_test_runs() -> None:
    env = (REPO / "tools" / "k8s" / "versions.env").read_text()
    match = re.search(r"^KUBERNETES_VERSION=(v\d+\.\d+)\.\d+$", env, re.MULTILINE)
    assert match is not None
    full, minor = match.group(0).split("=")[1], match.group(1)
    readme = section(README, "Supported Kubernetes versions")
    assert first_column(readme)[0] == minor
    assert full in readme
    kubernetes = section(DOCS / "kubernetes.md", "Supported Kubernetes versions")
    assert f"kube-scheduler **{minor}**" in kubernetes
    assert full in kubernetes
    assert full in (DOCS / "control-plane.md").read_text()


def granted(*manifests: str) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every rule of the ClusterRoles and Roles in deploy/base/."""
    out: set[tuple[str, str, str]] = set()
    for name in manifests:
        for doc in yaml.safe_load_all((REPO / "deploy" / "base" / name).read_text()):
            if doc["kind"] not in ("ClusterRole", "Role"):
                continue
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        out.update((group, resource, verb) for verb in rule["verbs"])
    return out


def test_operations_page_grants_exactly_what_the_scheduler_roles_grant() -> None:
    table = section(DOCS / "operations.md", "Permissions")
    documented = set()
    for line in table.splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) != 4 or cells[0] in ("API group", "---"):
            continue
        groups = ["" if g == "core" else g.strip("`") for g in cells[0].split(", ")]
        resources = [r.strip("`") for r in cells[1].split(", ")]
        verbs = cells[2].split(", ")
        documented |= {(g, r, v) for g in groups for r in resources for v in verbs}
    assert documented == granted("scheduler-clusterrole.yaml", "scheduler-role.yaml")


CONFIG = REPO / "configs" / "scheduler.yaml"
VALUES = REPO / "deploy" / "helm" / "topo-scheduler" / "values.yaml"
# A dotted name that ends like this is a file, not a setting (``agent.py``, ``admin.kubeconfig``).
FILE_SUFFIXES = (".py", ".kubeconfig", ".yaml", ".json", ".md")


def resolves(tree: object, path: str) -> bool:
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def test_every_setting_the_docs_name_exists() -> None:
    """A backticked ``section.field`` whose section is one of the config file's (or the chart's
    values) is a setting: it must exist in configs/scheduler.yaml, whose every field is written
    out, or in the chart's values.yaml (``config.`` there is the same file)."""
    config = yaml.safe_load(CONFIG.read_text())
    values = yaml.safe_load(VALUES.read_text())
    sections = "|".join(sorted(set(config) | set(values)))
    pattern = re.compile(rf"`((?:{sections})\.[A-Za-z][\w.]*)(?=[`:= ])")
    unknown = []
    for page in [README, *PAGES]:
        for path in pattern.findall(page.read_text()):
            if path.endswith(FILE_SUFFIXES):
                continue
            if not (resolves(config, path) or resolves(values, path)):
                unknown.append(f"{page.name}: {path}")
    assert unknown == []


def test_the_readme_simulate_example_is_what_simulate_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = section(README, "Simulate")
    match = re.search(r"```sh\ntopo-scheduler simulate (.+)\n```\n\n```\n(.*?)\n```", text, re.S)
    assert match is not None
    files = [str(REPO / f) for f in match.group(1).split()]
    assert main(["simulate", *files]) == 0
    assert capsys.readouterr().out.rstrip("\n") == match.group(2)


# Where a comment or a page may cite the README's sections by name.
CITING = ("scheduler", "tests", "benchmarks", "deploy", "configs", "docs", "tools")


def test_every_readme_section_cited_is_a_readme_heading() -> None:
    """The README's sections moved to docs/: a citation like README "State and HA" must now name
    a page; one that names a README heading that still exists is fine."""
    headings = {line[3:] for line in prose(README.read_text()) if line.startswith("## ")}
    cited = re.compile(r"README(?:'s)?,? \\?\"([^\"\\]+)\\?\"")
    stale = []
    for top in CITING:
        for path in (REPO / top).rglob("*"):
            if path == Path(__file__):
                continue  # its own docstring cites an example
            if not path.is_file() or path.suffix not in (
                ".py",
                ".md",
                ".yaml",
                ".json",
                ".sh",
                ".txt",
            ):
                continue
            for name in cited.findall(path.read_text(errors="replace")):
                if name not in headings:
                    stale.append(f'{path.relative_to(REPO)}: README "{name}"')
    assert stale == []
