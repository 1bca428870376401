"""ARCHITECTURE.md holds: every package and stage module it names exists (and a stage it leaves
empty is absent), and no import crosses a boundary it forbids. Imports are read with `ast`, those
inside functions included, so a lazy import counts like any other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "ARCHITECTURE.md").read_text()

#: source folder -> the importable name it is installed as (pyproject.toml's and lab/pyproject.toml's package-dir)
PACKAGES = {"include/fleetkit": "fleetkit", "plugins/fleet_airflow": "fleet_airflow", "lab/fleetlab": "fleetlab",
            "fleetctl": "fleetctl", "spark_jobs": "fleet_spark_jobs", "dags": "fleet_dags"}
CAPABILITIES = ("stuck", "trim", "ownership", "group_ids")
FLEETKIT = REPO / "include" / "fleetkit"


# -- the modules and their imports ---------------------------------------------------------------
def module_name(path: Path, root: Path | None = None) -> str:
    root = root or REPO
    for folder, name in PACKAGES.items():
        try:
            rel = path.relative_to(root / folder)
        except ValueError:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join([name, *parts])
    raise ValueError(f"{path} is in no package")


def project_modules(root: Path | None = None) -> dict[str, Path]:
    root = root or REPO
    return {module_name(p, root): p for folder in PACKAGES for p in sorted((root / folder).rglob("*.py"))}


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module `path` imports, at any depth of its code (functions too). `from a import b`
    is an import of a.b when that is a module of the project, else of a."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's own package up
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            for alias in node.names:
                out.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
    return out


def import_graph(root: Path | None = None) -> dict[str, set[str]]:
    modules = project_modules(root)
    known = set(modules)
    return {name: imports_of(path, name, known) for name, path in modules.items()}


GRAPH = import_graph()


def crossing(graph: dict[str, set[str]], importer: str, forbidden: tuple[str, ...]) -> list[str]:
    """`module -> import` lines where a module of `importer` imports one under a forbidden name."""
    def under(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    return sorted(f"{m} -> {i}" for m, imps in graph.items() if under(m, importer)
                  for i in imps if any(under(i, f) for f in forbidden))


# -- boundaries ------------------------------------------------------------------------------------
#: (importer, what it never imports): dags -> plugins -> include <- spark_jobs; fleetctl and fleetlab
#: beside them, the lab imported by none of the others
BOUNDARIES = [
    # the library's stages run in Spark's tasks and in process over Arrow tables: numpy, no pandas
    ("fleetkit", ("airflow", "pyspark", "pandas", "fleet_airflow", "fleetctl", "fleetlab", "fleet_dags",
                  "fleet_spark_jobs")),
    ("fleet_airflow", ("fleetlab", "fleetctl", "fleet_dags", "fleet_spark_jobs")),
    ("fleet_spark_jobs", ("airflow", "fleet_airflow", "fleetctl", "fleetlab", "fleet_dags")),
    ("fleet_dags", ("fleetlab", "fleetctl", "fleet_spark_jobs")),
    ("fleetctl", ("fleetlab", "fleet_airflow.operators", "fleet_dags", "fleet_spark_jobs", "pyspark")),
    # a stage never imports a later one: the plan (what a person approves) knows nothing of how it
    # is executed (what both need, a segment's files and the quarantine, is trim/layout.py)
    ("fleetkit.trim.plan", ("fleetkit.trim.execute", "fleetkit.trim.resume")),
    ("fleetkit.group_ids.plan", ("fleetkit.group_ids.execute",)),
    ("fleetkit.ownership.plan", ("fleetkit.ownership.execute",)),
    ("fleetkit.stuck.plan", ("fleetkit.stuck.execute",)),
    # a capability's rules are verdicts over values: they reach no cluster and read no data root
    *[(f"fleetkit.{c}.rules", ("fleetkit.clients", "fleetkit.collection", "fleetkit.core.datasets",
                               "kazoo", "confluent_kafka", "paramiko"))
      for c in ("stuck", "trim", "ownership", "group_ids")],
]


@pytest.mark.parametrize("importer,forbidden", BOUNDARIES, ids=[b[0] for b in BOUNDARIES])
def test_no_import_crosses_a_boundary(importer, forbidden):
    assert crossing(GRAPH, importer, forbidden) == []


def test_fleetctl_uses_only_the_adapters_settings_and_connections():
    """Of plugins/fleet_airflow, fleetctl imports the deployment's settings, its connections (where a
    connection lives in Airflow) and the DAG loaders it writes (`fleetctl deploy dags`), nothing else."""
    used = {i for m, imps in GRAPH.items() if m.split(".")[0] == "fleetctl" for i in imps
            if i.split(".")[0] == "fleet_airflow"}
    assert used <= {"fleet_airflow.settings", "fleet_airflow.clusters", "fleet_airflow.dag_files"}
    # connections only through fleetctl.connect (JSON variables first, Airflow where one lives there)
    through = sorted(m for m, imps in GRAPH.items() if m.split(".")[0] == "fleetctl" and "fleet_airflow.clusters" in imps)
    assert through == ["fleetctl.connect"], through


def layer(module: str) -> str | None:
    """fleetkit.<layer>.…: core, clients, collection, a capability; None for fleetkit itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "fleetkit" and len(parts) > 1 else None


def fleetkit_layer_problems(graph: dict[str, set[str]]) -> list[str]:
    """`core/` depends on nothing else in the package; `clients/` only on `core/`; `collection/` on
    both (and on `ownership.rules`); a capability on those and another capability's `rules` at most."""
    allowed = {"core": set(), "clients": {"core"}, "collection": {"core", "clients"}}
    allowed.update({c: {"core", "clients", "collection"} for c in CAPABILITIES})
    out = []
    for m, imps in graph.items():
        own = layer(m)
        if own not in allowed:
            continue  # fleetkit/__init__, fleetview (the fleet page's read model: reads every capability)
        for i in imps:
            other = layer(i)
            if not i.startswith("fleetkit.") or other in (None, own) or other in allowed[own]:
                continue
            if other in CAPABILITIES and (i.split(".")[2:3] == ["rules"]) and (own in CAPABILITIES or (
                    own == "collection" and other == "ownership")):
                continue
            out.append(f"{m} -> {i}")
    return sorted(out)


def test_fleetkit_layers_depend_one_way():
    assert fleetkit_layer_problems(GRAPH) == []


def cycles(graph: dict[str, set[str]], within: str) -> list[list[str]]:
    """The import cycles among the modules under `within` (strongly connected components of more
    than one module, or a module importing itself)."""
    nodes = sorted(m for m in graph if m == within or m.startswith(within + "."))
    edges = {m: sorted(i for i in graph[m] if i in graph and (i == within or i.startswith(within + ".")))
             for m in nodes}
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges[v]:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return sorted(out)


@pytest.mark.parametrize("package", ["fleetctl", "fleetlab"])
def test_no_import_cycle_between_modules(package):
    assert cycles(GRAPH, package) == []


# -- what ARCHITECTURE.md names exists ---------------------------------------------------------------
def table(heading_cell: str) -> list[list[str]]:
    """The rows (cells stripped) of the Markdown table whose header row starts with heading_cell."""
    lines = DOC.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {heading_cell} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_every_capability_package_it_names_exists():
    rows = table("capability")
    named = [re.fullmatch(r"`(\w+)/`", r[1]).group(1) for r in rows]
    assert named == list(CAPABILITIES)
    for package in named:
        assert (FLEETKIT / package / "__init__.py").exists(), f"ARCHITECTURE.md names include/fleetkit/{package}/"


def stage_module_problems(doc_rows: list[list[str]], fleetkit: Path) -> list[str]:
    """The stage-module table against the files: a filled cell names a module that exists, a cell
    in parentheses names where the stage lives instead (it exists; the capability has no module of
    that name), an empty cell a module that does not exist."""
    problems = []
    for row in doc_rows:
        module = re.match(r"`(\w+\.py)`", row[0]).group(1)
        for cap, cell in zip(CAPABILITIES, row[1:]):
            path = fleetkit / cap / module
            elsewhere = re.fullmatch(r"\(([\w/]+)\)", cell)
            if elsewhere:
                if not (fleetkit / f"{elsewhere.group(1)}.py").exists():
                    problems.append(f"{cap}/{module}: it names {elsewhere.group(1)}, which does not exist")
                if path.exists():
                    problems.append(f"{cap}/{module} exists, but the table says it lives in {elsewhere.group(1)}")
            elif cell and not path.exists():
                problems.append(f"{cap}/{module} is in the table ({cell!r}) but does not exist")
            elif not cell and path.exists():
                problems.append(f"{cap}/{module} exists but the table leaves it empty")
    return problems


def test_every_stage_module_it_names_exists_and_none_it_omits():
    rows = table("stage module")
    assert [c.strip("`") for c in DOC.split("| stage module |", 1)[1].splitlines()[0].strip(" |").split(" | ")] \
        == list(CAPABILITIES)
    assert stage_module_problems(rows, FLEETKIT) == []


#: where a path the document names may live (it names them relative to their package)
SEARCH = [REPO, FLEETKIT, REPO / "plugins" / "fleet_airflow", REPO / "plugins", REPO / "include", REPO / "lab"]


def named_paths() -> set[str]:
    """The file and folder names in ARCHITECTURE.md: `quoted` ones and those of its diagrams
    (<cap> stands for any capability)."""
    quoted = re.findall(r"`([\w./<>-]+(?:\.py|\.sha256|/))`", DOC)
    diagrams = re.findall(r"(?<![\w.])((?:[\w<>]+/)+(?:[\w]+\.py)?)", "\n".join(re.findall(r"```\n(.*?)```", DOC, re.S)))
    return set(quoted) | {d for d in diagrams if not d.startswith("http")}


def missing_paths(names: set[str], search: list[Path], everywhere: list[Path]) -> list[str]:
    missing = []
    for name in sorted(names):
        candidates = [name.replace("<cap>", c) for c in CAPABILITIES] if "<cap>" in name else [name]
        if "/" in name.rstrip("/"):
            found = any((base / c).exists() for c in candidates for base in search)
        else:  # a bare file name: somewhere in the project's packages
            found = any((base / name).exists() for base in search) or any(
                next(root.rglob(name.rstrip("/")), None) is not None for root in everywhere)
        if not found:
            missing.append(name)
    return missing


def test_every_file_and_folder_it_names_exists():
    names = named_paths()
    assert {"plugins/fleet_airflow/actions.py", "core/journal.py", "fleetctl/", "fleetlab/"} <= names  # the parse works
    everywhere = [REPO / folder for folder in PACKAGES]
    assert missing_paths(names, SEARCH, everywhere) == []


# -- the test can fail ------------------------------------------------------------------------------
def test_a_forbidden_import_a_cycle_and_a_missing_module_are_caught(tmp_path):
    """The checks above on a copy of the tree with a lazy fleetlab import in fleetctl, a cycle
    between two fleetctl modules, a capability importing another's plan, and a stage module gone."""
    for folder in PACKAGES:
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "fleetctl" / "__init__.py").write_text("")
    (tmp_path / "fleetctl" / "a.py").write_text("def f():\n    from fleetlab import lab\n    from fleetctl import b\n")
    (tmp_path / "fleetctl" / "b.py").write_text("from . import a\n")
    (tmp_path / "lab/fleetlab" / "__init__.py").write_text("")
    (tmp_path / "lab/fleetlab" / "lab.py").write_text("")
    for cap in CAPABILITIES:
        (tmp_path / "include/fleetkit" / cap).mkdir()
        (tmp_path / "include/fleetkit" / cap / "__init__.py").write_text("")
        (tmp_path / "include/fleetkit" / cap / "plan.py").write_text("")
    (tmp_path / "include/fleetkit/ownership/plan.py").write_text("from fleetkit.trim import plan\n")
    graph = import_graph(tmp_path)
    assert crossing(graph, "fleetctl", ("fleetlab",)) == ["fleetctl.a -> fleetlab.lab"]
    assert cycles(graph, "fleetctl") == [["fleetctl.a", "fleetctl.b"]]
    assert fleetkit_layer_problems(graph) == ["fleetkit.ownership.plan -> fleetkit.trim.plan"]
    (tmp_path / "include/fleetkit/trim/plan.py").unlink()
    assert stage_module_problems([["`plan.py`", "x", "x", "x", "x"]], tmp_path / "include/fleetkit") == [
        "trim/plan.py is in the table ('x') but does not exist"]
    assert missing_paths({"trim/plan.py", "stuck/plan.py"}, [tmp_path / "include/fleetkit"], []) == ["trim/plan.py"]



def test_the_library_has_no_import_circle():
    """No module of the library imports another that imports it back, directly or around a circle
    (an import inside a function counts: it is a dependency all the same)."""
    assert cycles(GRAPH, "fleetkit") == []
    # and the check sees one
    assert cycles({"fleetkit.a": {"fleetkit.b"}, "fleetkit.b": {"fleetkit.a"}, "fleetkit.c": set()}, "fleetkit") == [
        ["fleetkit.a", "fleetkit.b"]]

def test_the_readme_is_a_guide_whose_links_resolve():
    """README.md is the user's guide (at most 250 lines: the reference is in docs/), and every
    relative link in it names a file of the repository."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", readme) if "://" not in t and not t.startswith("#")]
    assert targets, "the guide links to no page of docs/"
    assert [t for t in targets if not (REPO / t).exists()] == []


def written_datasets(paths) -> list[tuple[str, str]]:
    """(file, dataset) of every write_dataset(..., "<dataset>", ...) call with a literal name."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "write_dataset":
                out += [(path.name, a.value) for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return out


def test_every_dataset_a_job_writes_has_its_schema_declared_once():
    """A job's Parquet datasets (write_dataset, both engines) are declared in core/datasets.py, as
    are the collection's (table_from_rows refuses an undeclared one)."""
    from fleetkit.core.datasets import FINDINGS, SCHEMAS

    written = written_datasets([*(REPO / "spark_jobs").glob("*.py"), *FLEETKIT.rglob("*.py")])
    assert {d for _, d in written} >= {"stuck_findings", "stuck_groups"}  # the check sees the writers
    assert [(f, d) for f, d in written if d not in SCHEMAS and d not in FINDINGS] == []
    assert not set(SCHEMAS) & set(FINDINGS)


def test_the_engines_of_a_capability_share_its_stages():
    """A capability with an in-process engine runs the same stages module as its Spark job: the
    facts, rules, roll-ups and output schemas are written once, in the library."""
    for capability, job in (("stuck", "stuck"), ("trim", "trim_health"),
                            ("group_ids", "group_ids")):
        inprocess = GRAPH[f"fleetkit.{capability}.inprocess"]
        spark = GRAPH[f"fleet_spark_jobs.{job}"]
        shared = {m for m in inprocess & spark if m.startswith(f"fleetkit.{capability}.")}
        assert shared, (capability, "no library module both engines call")
        assert "pandas" not in {i.split(".")[0] for i in inprocess}, capability


def test_bench_imports_no_test_module():
    bench = {name: imports_of(p, name, set(GRAPH)) for p in (REPO / "bench").glob("*.py") for name in [p.stem]}
    assert sorted(f"bench/{n}.py -> {i}" for n, imps in bench.items() for i in imps
                  if i == "tests" or i.startswith("tests.")) == []


# -- one name per capability: package, Spark job, DAG id, docs page ----------------------------------
#: the DAG that is no capability's (the fleet-wide scheduled one)
FLEET_WIDE_DAGS = {"fleet_maintenance"}


def dag_ids_in(dags: Path) -> dict[str, str]:
    """{DAG id: module} of the DAG modules in `dags`: the literal `dag_id` each one's `build` (or
    DAG(...)) defaults to or passes, and the literal an alias module passes to `build`."""
    out = {}
    for path in sorted(dags.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        ids = []
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "build":
                ids += [d.value for d in node.args.defaults if isinstance(d, ast.Constant) and isinstance(d.value, str)]
            elif isinstance(node, ast.Call):
                name = getattr(node.func, "id", getattr(node.func, "attr", None))
                ids += [k.value.value for k in node.keywords if k.arg == "dag_id" and isinstance(k.value, ast.Constant)]
                if name in ("build", "runbook_dag_args") and node.args and isinstance(node.args[0], ast.Constant):
                    ids.append(node.args[0].value)
        for i in ids:
            out[i] = path.stem
    return out


def capability_name_problems(root: Path, renamed: dict[str, str]) -> list[str]:
    """Whatever goes by another name than its capability's (a package of include/fleetkit in
    CAPABILITIES): a Spark job whose file name starts with none, a DAG id (other than the fleet-wide
    one and the deprecated aliases of `renamed`) that is neither `<cap>` nor `runbook_<cap>[_...]`,
    a capability without `docs/<cap with - for _>.md`."""
    caps = [c for c in CAPABILITIES if (root / "include" / "fleetkit" / c / "__init__.py").exists()]
    problems = [f"include/fleetkit/{c}/ is missing" for c in CAPABILITIES if c not in caps]

    def of_a_capability(name: str) -> bool:
        return any(name == c or name.startswith(c + "_") for c in caps)

    for job in sorted((root / "spark_jobs").glob("*.py")):
        if job.name not in ("__init__.py", "jobs_common.py") and not of_a_capability(job.stem):
            problems.append(f"spark_jobs/{job.name} is named after no capability")
    for dag_id, module in sorted(dag_ids_in(root / "dags").items()):
        if dag_id in FLEET_WIDE_DAGS or dag_id in renamed:
            continue
        if not (dag_id in caps or any(dag_id == f"runbook_{c}" or dag_id.startswith(f"runbook_{c}_") for c in caps)):
            problems.append(f"DAG {dag_id} (dags/{module}.py) is named after no capability")
        if module != dag_id:
            problems.append(f"DAG {dag_id} is defined in dags/{module}.py")
    problems += [f"docs/{c.replace('_', '-')}.md is missing" for c in caps
                 if not (root / "docs" / f"{c.replace('_', '-')}.md").exists()]
    return problems


def test_each_capability_goes_by_one_name():
    from fleet_airflow.dag_files import RENAMED

    ids = dag_ids_in(REPO / "dags")
    assert {"fleet_maintenance", "runbook_trim", "ownership", *RENAMED} <= set(ids)  # the parse sees them
    # a deprecated alias is an old id whose module builds the new one's DAG
    assert all(ids[old] == old and (REPO / "dags" / f"{new}.py").exists() for old, new in RENAMED.items())
    assert capability_name_problems(REPO, RENAMED) == []


def test_a_name_of_no_capability_is_caught(tmp_path):
    for cap in CAPABILITIES:
        (tmp_path / "include/fleetkit" / cap).mkdir(parents=True)
        (tmp_path / "include/fleetkit" / cap / "__init__.py").write_text("")
        (tmp_path / "docs").mkdir(exist_ok=True)
        (tmp_path / "docs" / f"{cap.replace('_', '-')}.md").write_text("")
    (tmp_path / "spark_jobs").mkdir()
    (tmp_path / "dags").mkdir()
    for name in ("jobs_common.py", "stuck.py", "trim_plan.py", "offsets_health.py"):
        (tmp_path / "spark_jobs" / name).write_text("")
    (tmp_path / "dags" / "runbook_trim.py").write_text('def build(dag_id="runbook_trim"):\n    pass\n\ndag = build()\n')
    (tmp_path / "dags" / "runbook_offsets_trim.py").write_text('dag = build("runbook_offsets_trim")\n')
    (tmp_path / "dags" / "coordinator_check.py").write_text('with DAG(dag_id="coordinator_check") as dag:\n    pass\n')
    (tmp_path / "docs" / "group-ids.md").unlink()
    assert capability_name_problems(tmp_path, {"runbook_offsets_trim": "runbook_trim"}) == [
        "spark_jobs/offsets_health.py is named after no capability",
        "DAG coordinator_check (dags/coordinator_check.py) is named after no capability",
        "docs/group-ids.md is missing"]


def test_the_distribution_ships_every_package():
    """Every folder with an __init__.py under the installed folders is a package pyproject.toml
    lists (setuptools ships only those: a missing one works from the checkout and fails installed)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(project["packages"])
    found = set()
    for name, folder in project["package-dir"].items():
        for init in (REPO / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((name, *rel)))
    assert sorted(found - listed) == [] and sorted(listed - found) == []
