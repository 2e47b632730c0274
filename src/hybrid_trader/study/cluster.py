"""Start Ray on this machine or join a cluster, with Ray's token authentication (Ray 2.52 and later).

Joining (``study --address HOST:PORT``) does what Ray does for a local cluster it finds itself
(and what Ray 2.61 does for every address): when ``RAY_AUTH_MODE`` is not set and a token is
available (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or ``~/.ray/auth_token``),
the driver authenticates with it, so a head started with token authentication (``RAY_AUTH_MODE=token
ray start --head``, or any ``ray start --head`` while ``~/.ray/auth_token`` exists) accepts it; a
head without authentication ignores the token. ``RAY_AUTH_MODE=disabled`` turns this off.

A process that already runs Ray (a notebook's ``ray.init()``, a test session's) keeps it: a study
runs its trials on that Ray, at most ``workers`` at a time, and leaves it running
(:func:`ray_for_study`).

Before Ray's own connection (which retries a dead or refusing address for a minute), the address
is checked: a port that does not answer, and a cluster that refuses this driver's token (or
its lack of one), are each refused with their own message and fix.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from hybrid_trader.errors import UserError

AUTH_FIX = ("give the driver the cluster's token: copy the head's ~/.ray/auth_token to this machine's ~/.ray/"
            "auth_token, or export RAY_AUTH_TOKEN=<token> (or RAY_AUTH_TOKEN_PATH=<file>); `ray get-auth-token` "
            "on the head prints it (docs/STUDY.md, On a cluster)")
ADDRESS_FIX = ("check --address (ray start --head prints it, e.g. 10.0.0.5:6379), or leave it out to run on this "
               "machine")


def probe(address: str, timeout: float = 5.0) -> None:
    """A quick TCP check of a cluster's address: Ray itself retries a dead one for minutes."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as err:
        raise UserError(f"the Ray cluster at {address} does not answer ({err})", value=address,
                        fix=ADDRESS_FIX) from None


def use_token_if_available() -> bool:
    """Turn on token authentication for this process when ``RAY_AUTH_MODE`` is unset and a token is available
    (Ray's own rule for a local cluster); True when the driver authenticates with a token."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.lower() == "token"
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray before token authentication (2.52)
        return False
    return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


def auth_refused(address: str, err: Exception, token: bool) -> UserError:
    """The message of a cluster that refused the driver's authentication."""
    how = ("with the token it has (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) but the cluster's "
           "differs") if token else "without a token (none in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
    text = str(err).split(". ", 1)[0]
    return UserError(f"the Ray cluster at {address} refused this driver's authentication: it uses token "
                     f"authentication and the driver connected {how} ({type(err).__name__}: {text})",
                     value=address, fix=AUTH_FIX)


def check_auth(address: str, token: bool) -> None:
    """Ask the cluster's GCS once (a second): an ``AuthenticationError`` is refused as such (not a Ray Client
    ``ray://`` address: no GCS answers there)."""
    if address == "auto" or "://" in address:
        return
    try:
        from ray._raylet import GcsClient  # type: ignore[attr-defined]
        from ray.exceptions import AuthenticationError
    except ImportError:
        return
    try:
        GcsClient(address=address)
    except AuthenticationError as err:
        raise auth_refused(address, err, token) from None
    except Exception:  # anything else: ray.init's own error says it
        return


def ray_init(workers: int, address: str | None) -> Any:
    """Ray started on this machine with ``workers`` CPUs, or joined at ``address``; the ``ray`` module."""
    import ray  # only when trials run: ray takes ~1 s to import and starts its own processes

    token = False
    if address:
        probe(address)
        token = use_token_if_available()
        check_auth(address, token)
    try:
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    except Exception as err:  # ConnectionError, a timeout, a refused address: all say the same to the user
        if address and type(err).__name__ == "AuthenticationError":
            raise auth_refused(address, err, token) from None
        raise UserError(f"could not start or join Ray ({type(err).__name__}: {str(err)[:200]})",
                        value=address or f"local, {workers} CPUs", fix=ADDRESS_FIX) from None
    return ray


def running_ray_cpus() -> int | None:
    """The CPUs of the Ray this process already runs (all of its cluster's, when it joined one); None without one.

    A study given no ``workers`` runs that many trials at a time on it, not this machine's core count."""
    if "ray" not in sys.modules:  # no Ray imported, so none running: importing it here would cost seconds
        return None
    import ray  # already imported (above): free

    if not ray.is_initialized():
        return None
    return int(ray.cluster_resources().get("CPU", 0)) or None


def ray_for_study(workers: int, address: str | None,
                  start: Callable[[int, str | None], Any] = ray_init) -> tuple[Any, bool]:
    """Ray for one study, and whether this call started it (then the study shuts it down when it ends).

    The Ray this process already runs (a caller's ``ray.init()``) is used as it is and left running; the study
    then keeps at most ``workers`` trials in flight itself. Otherwise Ray is started on this machine or joined at
    ``address`` (``start``: :func:`ray_init`)."""
    import ray  # only when trials run (see ray_init)

    if not ray.is_initialized():
        return start(workers, address), True
    if address:
        probe(address)  # a dead address is said as such first
        raise UserError(f"this process already runs Ray, so a study cannot join the cluster at {address} from it",
                        value=address, fix="call ray.shutdown() before running the study with an address, or "
                        "leave the address out to run the study on the Ray this process runs")
    return ray, False
