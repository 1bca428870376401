# PYTHON_ARGCOMPLETE_OK (shell completion: argcomplete; docs/operating.md)
"""fleetctl: the toolkit's operator CLI, for incident shells (outside Airflow). One module per verb
group (fleetctl/*_cmds.py, fleetctl/incident.py); the lab has its own command, `fleetlab`.

Settings come from the deployment's environment (fleetkit.core.settings; `fleetctl deploy check`
shows them). Connection ids resolve the way Airflow resolves them: AIRFLOW_CONN_<ID> environment
variables, the secrets backends, then the Airflow metadata database (AIRFLOW_HOME / AIRFLOW_CONFIG
of the caller's environment, as for Airflow's own CLI).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from fleetkit.core.errors import FleetError

from fleetctl import (audit_cmds, collect_cmds, coordinator_cmds, deploy_cmds, groupids_cmds, groups_cmds, incident,
                      lock_cmds, offsets_cmds, runbook_cmds, trim_cmds)
from fleetctl.connect import airflow_context
from fleetctl.output import BAD_INPUT, BLIND, INTERRUPTED, OK, exit_codes_text, red, say_blind, stdout_closed

log = logging.getLogger("fleetctl")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetctl", description="Kafka fleet maintenance toolkit")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)
    for verbs in (offsets_cmds, coordinator_cmds, audit_cmds, trim_cmds, groupids_cmds, lock_cmds, runbook_cmds,
                  deploy_cmds):
        verbs.add_parser(sub)
    incident.add_parsers(sub)
    collect_cmds.add_parser(sub)
    groups_cmds.add_parser(sub)
    for parser in [p, *_subparsers(p)]:  # one exit-code table, under every command's --help
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = "\n\n".join(x for x in (parser.epilog, exit_codes_text()) if x)
        for action in parser._actions:  # --cluster completes from the fleet file's names
            if action.dest == "cluster":
                action.completer = cluster_names
    return p


def cluster_names(prefix: str, parsed_args=None, **_) -> list[str]:
    """Shell completion of --cluster: the names in the fleet file (--fleet, else $FLEET_FILE); none
    when it cannot be read (completion never fails loudly)."""
    import yaml

    path = getattr(parsed_args, "fleet", None) or os.environ.get("FLEET_FILE")
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
        names = [c.get("name") for c in doc.get("clusters") or [] if isinstance(c, dict)]
    except (OSError, TypeError, AttributeError, yaml.YAMLError):
        return []
    return sorted(n for n in names if isinstance(n, str) and n.startswith(prefix))


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                out += [child, *_subparsers(child)]
    return out


# Commands (or "command subcommand") that need no Airflow in the process: fleetctl imports no
# Airflow for them (nor for --help), so they start in a fraction of a second.
AIRFLOW_FREE_COMMANDS = ("offsets", "coordinator partition", "coordinator who", "lock", "lag", "stuck", "collect",
                         "groups", "groupids diff", "runbook", "deploy")


def needs_airflow(args: argparse.Namespace) -> bool:
    sub = getattr(args, f"{args.command}_command", None)
    return args.command not in AIRFLOW_FREE_COMMANDS and f"{args.command} {sub}" not in AIRFLOW_FREE_COMMANDS


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from fleetkit.core.errors import AuthenticationFailed, ClusterUnreachable, NotAuthorized, TlsHandshakeFailed

    from fleetctl.airflow_api import AirflowUnreachable
    from fleetctl.connect import install_data_root_store

    install_data_root_store()
    try:
        return args.func(args)
    except (AuthenticationFailed, NotAuthorized, TlsHandshakeFailed) as e:
        # the cluster answered but the toolkit could not see: a refused login, a missing ACL
        return say_blind([str(e)])
    except (ClusterUnreachable, AirflowUnreachable) as e:
        print(red(f"error: {e}"), file=sys.stderr)
        return BLIND
    except FleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        if not stdout_closed():
            raise  # a socket's, not the reader's: not a quiet end
        return OK  # `fleetctl offsets dump ... | head`: the reader has what it wanted


def console_main() -> int:
    """The `fleetctl` command: stdout carries only what the command prints (tab-separated lines
    scripts parse); Airflow's and the libraries' logs go to stderr, warnings and up unless -v."""
    import warnings

    verbose = any(a in ("-v", "--verbose") for a in sys.argv[1:])
    if not verbose:
        warnings.filterwarnings("ignore", category=DeprecationWarning)
    parser = build_parser()
    import argcomplete

    argcomplete.autocomplete(parser)  # answers a shell's completion request and exits (else nothing)
    args = parser.parse_args()  # --help and usage errors end here, before any Airflow import
    if not needs_airflow(args):
        return run(args)  # e.g. lag, stuck, collect: they start fast
    try:
        airflow_context()
    except FleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return BAD_INPUT
    import airflow  # noqa: F401 - configures Airflow's logging, to stdout ...
    logs_to_stderr(logging.DEBUG if verbose else logging.WARNING)  # ... moved to stderr
    return run(args)


def logs_to_stderr(level: int) -> None:
    """Every log handler that writes to stdout writes to stderr instead, at `level` and up: stdout
    carries only what the command prints. Through the logging module's public API (Airflow's own
    logging is a dictConfig of stdlib handlers)."""
    seen = set()
    loggers = [logging.getLogger()] + [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)]
    for lg in loggers:
        for handler in getattr(lg, "handlers", []):
            if id(handler) in seen:
                continue
            seen.add(id(handler))
            if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in (
                    sys.stdout, sys.__stdout__):
                handler.setStream(sys.stderr)
    logging.getLogger().setLevel(level)


if __name__ == "__main__":
    sys.exit(console_main())
