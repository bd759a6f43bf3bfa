"""``redis-session doctor``: whether the server suits the store (:mod:`redis_session.doctor`):
eviction policy, memory limit, persistence, replication, the ACL rights of the store's user,
cluster state, server version, damaged index records. Exit status 1 on a problem.
"""

from __future__ import annotations

import click

from .. import doctor as checks
from ._common import CliError, Target, echo_json, json_option, make_console, store_options, text

MARKS = {
    checks.OK: ("ok", "green"),
    checks.WARN: ("warn", "yellow"),
    checks.PROBLEM: ("PROBLEM", "red"),
}


@click.command(short_help="Check that the server suits the store (policy, limits, ACL...).")
@store_options
@click.option("--acl-user", default=None, help="Whose ACL rights to check [default: yours].")
@json_option
def doctor(target: Target, acl_user: str | None, as_json: bool) -> None:
    """Check the server behind --url for the store under --prefix: the eviction policy (it
    must be noeviction), the memory limit, persistence, replication, the ACL rights of the
    store's user for every command the store sends, the cluster's state, the server version
    and the session index's records. Warnings leave the exit status 0; a problem makes it 1.
    """
    if target.is_memory:
        raise CliError(
            "memory:// is an in-process store: there is no server to check", kind="usage"
        )
    with target.open() as store:
        report = checks.diagnose(store.client, target.prefix, acl_user=acl_user)
    if as_json:
        echo_json(report.as_json())
    else:
        console = make_console()
        console.print(text(f"server: {report.server}, prefix {target.prefix}"))
        for check in report.checks:
            mark, style = MARKS[check.status]
            line = text(f"{mark:8s}", style)
            line.append(text(f"{check.name}: {check.detail}"))
            if check.advice:
                line.append(text(f" -> {check.advice}", "dim"))
            console.print(line)
    if not report.ok:
        raise SystemExit(1)
