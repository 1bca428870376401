"""fleetctl starts fast: --help and the commands that need no Airflow import none of the heavy
libraries (the timing itself is bench/cli_startup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleetctl.cli import build_parser, needs_airflow

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("airflow", "pyspark", "confluent_kafka", "kazoo", "pyarrow", "fleet_airflow")

# what the `fleetctl` console script runs (pyproject: fleetctl.cli:console_main)
CONSOLE = "import sys; from fleetctl.cli import console_main; sys.argv[0] = 'fleetctl'; sys.exit(console_main())"

AIRFLOW_FREE = [
    ["--help"],
    ["offsets", "decode", "--key", "000100016700017400000003",
     "--value", "0001000000000000002a00036d310000000000000003e800000000000007d0"],
    ["offsets", "cleaner-capacity", "--dedupe-buffer-size", "134217728"],
    ["coordinator", "partition", "my-group", "--partitions", "50"],
    ["coordinator", "who", "--help"],
    ["lag", "--help"],
    ["stuck", "--help"],
    ["offsets", "dump", "--help"],
]


def imported_modules(code: str, *argv: str) -> tuple[set[str], subprocess.CompletedProcess]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code, *argv],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    mods = set()
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name)
    return mods, out


def heavy(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in HEAVY)


def test_importing_the_cli_imports_no_heavy_library():
    mods, out = imported_modules("import fleetctl.cli")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fleetctl.cli" in mods  # the parse saw the import lines
    assert heavy(mods) == []


@pytest.mark.parametrize("argv", AIRFLOW_FREE, ids=lambda a: " ".join(a[:2]))
def test_airflow_free_commands_import_no_heavy_library(argv):
    mods, out = imported_modules(CONSOLE, *argv)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fleetctl.cli" in mods
    assert heavy(mods) == []


@pytest.mark.parametrize("argv,expected", [
    (["offsets", "decode", "--key", "00"], False),
    (["offsets", "cleaner-capacity", "--dedupe-buffer-size", "1"], False),
    (["coordinator", "partition", "g"], False),
    (["coordinator", "who", "g", "--cluster", "lab"], False),  # like collect: JSON connection variables, else Airflow
    (["collect", "--cluster", "lab"], False),  # like lag and stuck: JSON connection variables, else Airflow
    (["groupids", "diff", "--cluster", "lab"], False),
    (["audit", "list"], True),
    (["lag", "g", "--cluster", "lab"], False),  # connections from AIRFLOW_CONN_ JSON variables (else Airflow)
    (["stuck", "--cluster", "lab"], False),
    (["offsets", "dump", "--segment", "x.log"], False),
])
def test_which_commands_set_up_airflow(argv, expected):
    assert needs_airflow(build_parser().parse_args(argv)) is expected


@pytest.mark.parametrize("command,code", [(["lag", "g", "--data-root"], 4), (["collect", "--out"], 4)],
                         ids=["lag", "collect"])
def test_the_incident_path_on_a_json_connection_imports_no_airflow(tmp_path, command, code):
    """The incident path: the fleet file, the connection from its AIRFLOW_CONN_ variable, the
    Kafka client; a broker that does not answer ends it with 4 (could not see), for lag and collect
    alike, naming the cluster."""
    import json
    import os

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("version: 1\nclusters:\n  - {name: far, kafka_version: '3.9.2', kafka_conn_id: far_kafka, "
                     "approvers: [a]}\n")
    env = dict(os.environ, AIRFLOW_CONN_FAR_KAFKA=json.dumps({"conn_type": "kafka",
                                                              "extra": {"bootstrap.servers": "127.0.0.1:9"}}))
    *verb, data_flag = command
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", CONSOLE, *verb, "--cluster", "far",
                          "--fleet", str(fleet), "--timeout", "2", data_flag, str(tmp_path / "data")],
                         capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    mods = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}
    assert out.returncode == code, out.stderr[-2000:]
    assert "confluent_kafka" in mods and not [m for m in mods if m.split(".")[0] in ("airflow", "pyspark")]
    assert "cluster 'far'" in [x for x in out.stderr.splitlines() if x.startswith("error:")][0]


@pytest.mark.parametrize("argv", [["lab"], ["airflow", "status"], ["trigger", "some_dag"], ["demo"]])
def test_the_lab_verbs_are_not_fleetctls(argv, capsys):
    """The lab, the project's Airflow processes and the demo are `fleetlab` verbs; an operator's
    fleetctl has none of them."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(argv)
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_the_lab_command_imports_no_heavy_library():
    mods, out = imported_modules("import sys; from fleetlab.cli import main; sys.argv[0] = 'fleetlab'; "
                                 "sys.exit(main(['--help']))")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fleetlab.cli" in mods and "up" in out.stdout and "broker-config" in out.stdout
    assert heavy(mods) == [] and not [m for m in mods if m.split(".")[0] == "fleetctl"]


def test_nothing_calls_the_lab_verbs_through_fleetctl():
    """The Makefile, the demo, the benchmarks, the docs and the tests call the lab, its Airflow,
    trigger and the demo through `fleetlab`, in prose and in argv lists alike."""
    import re

    said = re.compile(r"fleetctl[\"'`]?[,()]?\s*[\"'`]?(lab|demo|trigger|airflow[\"']?,?\s+[\"']?(up|down|env|status))\b")
    argv = re.compile(r"\[\s*\w*ctl\w*(\(\))?\s*,\s*[\"'](lab|demo|trigger|airflow)[\"']")
    files = [REPO / "Makefile", REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "airflow.cfg",
             REPO / "lab" / "fleets" / "lab.yaml"]
    for folder in ("lab", "fleetctl", "bench", "docs", "tests", "include", "plugins", "dags"):
        files += [p for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".md", ".yaml")]
    found = [f"{p.relative_to(REPO)}: {m.group(0)!r}" for p in files if p.resolve() != Path(__file__).resolve()
             for m in [*said.finditer(p.read_text()), *argv.finditer(p.read_text())]]
    assert found == []


def test_every_command_shows_an_example_and_the_exit_codes_in_its_help():
    """README promises an example under every command's --help: each leaf command's epilog has one,
    and it names the command it is for; then the one exit-code table (the same for every command)."""
    import argparse

    from fleetctl import cli
    from fleetctl.output import EXIT_CODES, exit_codes_text

    missing = []
    table = exit_codes_text()
    assert [line.split()[0] for line in table.splitlines()[1:]] == [str(code) for code, _ in EXIT_CODES]
    assert [code for code, _ in EXIT_CODES] == [0, 1, 2, 3, 4, 5, 130]

    def walk(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not (parser.epilog or "").endswith(table):
            missing.append(" ".join(path) + ": no exit-code table")
        if not subs:
            epilog = parser.epilog or ""
            if "example" not in epilog or " ".join(path) not in epilog:
                missing.append(" ".join(path))
            return
        for s in subs:
            for name, sp in s.choices.items():
                walk(sp, path + [name])

    walk(cli.build_parser(), ["fleetctl"])
    assert missing == []


#: commands that change something and print what they did (their exit code is the answer)
ACTIONS = {"audit rollback", "audit seal", "audit copy-heads", "trim resume", "trim restore", "lock clear",
           "runbook start"}
#: commands whose output is JSON already (one document, or JSON lines)
JSON_ALWAYS = {"offsets decode", "offsets dump", "offsets cleaner-capacity"}


def test_every_command_that_prints_data_has_json():
    import argparse

    from fleetctl import cli

    leaves = {}

    def walk(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            leaves[" ".join(path)] = {o for a in parser._actions for o in a.option_strings}
        for s in subs:
            for name, sp in s.choices.items():
                walk(sp, path + [name])

    walk(cli.build_parser(), [])
    assert ACTIONS | JSON_ALWAYS <= set(leaves)
    assert [c for c, opts in leaves.items() if c not in ACTIONS | JSON_ALWAYS and "--json" not in opts] == []


def test_json_answers_parse(tmp_path, capsys, monkeypatch):
    import json

    from fleetctl.cli import main
    from fleetkit.core.partitioning import partition_for

    assert main(["coordinator", "partition", "orders", "billing ĝ", "--partitions", "50", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["groups"] == [{"group": "orders", "partition": partition_for("orders", 50)},
                             {"group": "billing ĝ", "partition": partition_for("billing ĝ", 50)}]
    monkeypatch.delenv("FLEET_STATE_CONN_ID", raising=False)
    assert main(["lock", "status", "--lock-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["locks"] == []


@pytest.mark.parametrize("line, expected", [("fleetctl gro", ["groupids", "groups"]),
                                            ("fleetctl lag --cluster la", ["lab", "lab43"]),
                                            ("fleetctl groups --st", ["--state"])])
def test_shell_completion_of_commands_options_and_cluster_names(tmp_path, line, expected):
    """What a shell gets from `eval "$(register-python-argcomplete fleetctl)"`: commands, options,
    and --cluster's names from the fleet file."""
    import os

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("version: 1\nclusters:\n  - {name: lab, kafka_version: '0.9.0.1'}\n"
                     "  - {name: lab43, kafka_version: '4.3.1'}\n  - {name: other, kafka_version: '3.9.2'}\n")
    out = tmp_path / "completions"
    env = dict(os.environ, _ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)),
               _ARGCOMPLETE_STDOUT_FILENAME=str(out), FLEET_FILE=str(fleet))
    p = subprocess.run([sys.executable, "-c", CONSOLE], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert sorted(x.strip() for x in out.read_text().split("\v")) == expected
