"""``redis-session acl``: the ``ACL SETUSER`` line for a user confined to one store's prefix,
computed from the scripts and the client's own commands (:mod:`redis_session.acl`).
"""

from __future__ import annotations

import click

from .. import acl as recipe
from ._common import DEFAULT_PREFIX, echo_json, json_option


@click.command(short_help="Print the ACL SETUSER line for a user of one store's prefix.")
@click.option(
    "--prefix",
    envvar="REDIS_SESSION_PREFIX",
    default=DEFAULT_PREFIX,
    show_default=True,
    help="Key prefix of the store; env REDIS_SESSION_PREFIX.",
)
@click.option("--user", default="redis-session", show_default=True, help="The ACL user name.")
@json_option
def acl(prefix: str, user: str, as_json: bool) -> None:
    """Print the ACL SETUSER line that lets USER run every store operation under --prefix
    (its keys and its events channel only, and only the commands the store, its listener and
    these tools send), for redis-cli: `redis-session acl --prefix app: | redis-cli`.

    The line sets no password: give the user one, e.g. ACL SETUSER NAME '>secret'.
    Generated from the Lua scripts' own commands, so it follows the installed version.
    """
    line = recipe.setuser_line(prefix, user)
    if as_json:
        echo_json(
            {
                "user": user,
                "prefix": prefix,
                "rules": recipe.acl_rules(prefix),
                "commands": list(recipe.commands()),
                "line": line,
            }
        )
    else:
        click.echo(line)
