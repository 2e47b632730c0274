"""``hybrid-trader watch JOURNAL.sqlite``: the executor's journal live in the browser (docs/LIVE.md)."""

from __future__ import annotations

import argparse
import errno
import socket
import sys

from hybrid_trader.errors import UserError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "watch",
        help="serve a local page showing a running (or finished) executor's journal, live",
        description="Serve a page at http://127.0.0.1:PORT/ that shows the journal of `hybrid-trader run` as the "
        "executor writes it, updated within a second of each bar (server-sent events): the price with the trades, "
        "the position and open orders, equity against the trailing threshold and the daily loss limit, the last "
        "decisions with their reason codes, probabilities and advice, halts and NinjaTrader's state, latency. "
        "It reads the journal read-only (never writes it nor takes its writer's lock; the executor does not wait "
        "for it). A journal that cannot be read yet (missing, empty, damaged, another schema version) is said on "
        "the page and here, and read again as soon as it can be. Ctrl-C stops it.",
    )
    p.add_argument("journal", metavar="JOURNAL", help="the --journal FILE of `hybrid-trader run`")
    p.add_argument("--port", type=int, default=8765, help="TCP port (default 8765; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; another address shows the "
                        "account to whoever reaches it, without a password, and prints a warning)")
    p.add_argument("--last", type=int, default=20, metavar="N", help="decisions listed (default 20)")
    p.add_argument("--bars", type=int, default=390, metavar="N",
                   help="bars on the price chart (default 390: a regular session of 1-minute bars)")
    p.add_argument("--poll", type=float, default=0.1, metavar="SECONDS",
                   help="how often the journal is checked for new rows (default 0.1)")
    p.set_defaults(func=_watch)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; a port in use or an address not of this machine is a UserError."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as err:
        raise UserError(f"--host {host}: not an address of this machine ({err.strerror})", value=host,
                        fix="leave --host out (127.0.0.1), or give one of this machine's addresses") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
        sock.listen(64)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {host} is in use (another watch, or another program)", value=port,
                            fix=f"give another port (--port {port + 1}), or --port 0 for any free one") from None
        if err.errno in (errno.EACCES, errno.EPERM):
            raise UserError(f"not allowed to listen on port {port} (ports below 1024 need root)", value=port,
                            fix="give a port of 1024 or more, e.g. --port 8765") from None
        raise UserError(f"cannot listen on {host}:{port}: {err.strerror or err}", value=host,
                        fix="leave --host out (127.0.0.1), or give one of this machine's addresses") from None
    sock.setblocking(False)
    return sock


def _watch(args: argparse.Namespace) -> int:
    for name, value in (("--last", args.last), ("--bars", args.bars)):
        if value < 1:
            raise UserError(f"{name} {value}: at least 1", value=value, fix=f"e.g. {name} 20")
    if not 0.01 <= args.poll <= 10:
        raise UserError(f"--poll {args.poll}: between 0.01 and 10 seconds", value=args.poll, fix="e.g. --poll 0.1")
    try:  # only this command needs the web server: `hybrid-trader --help` must not load it
        import uvicorn

        from hybrid_trader.watch.app import Watcher, create_app, plotly_js  # pulls in starlette
    except ImportError as err:
        raise UserError(f"hybrid-trader watch needs {err.name}, which is not installed",
                        fix="pip install -e '.[watch]' (starlette, uvicorn and plotly)") from None
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    if args.host not in LOCAL_HOSTS:
        print(f"warning: listening on {args.host}: whoever reaches this machine on port {port} sees the account, "
              "its positions and orders, without a password; prefer the default 127.0.0.1 and an SSH tunnel "
              f"(ssh -L {port}:127.0.0.1:{port} HOST)", file=sys.stderr)
    watcher = Watcher(args.journal, last=args.last, bars=args.bars)
    watcher.poll()
    if not watcher.state["ok"]:
        print(f"warning: {watcher.state['detail']}\n  the page says so, and reads the journal again every "
              f"{args.poll:g} s until it can", file=sys.stderr)
    if plotly_js() is None:
        print("note: the plotly package is not installed: the page shows no charts (pip install plotly)",
              file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"watch: http://{shown}:{port}/  (journal {watcher.path}, read-only; Ctrl-C stops)", flush=True)
    config = uvicorn.Config(create_app(watcher, poll_s=args.poll), log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=1)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
