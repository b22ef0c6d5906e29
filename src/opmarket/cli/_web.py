"""``opmarket serve``, ``users``, ``tokens``, ``validate``, ``yank`` and ``worker``: the
marketplace's commands (opmarket.web does the work)."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import threading
import typing
from pathlib import Path
from typing import Any

import click

from opmarket.cli._usage import CONTEXT, EXIT_PROBLEM, EXIT_USAGE, UsageError

__all__ = [
    "data_option",
    "serve",
    "settings_from",
    "state_from",
    "tokens",
    "users",
    "validate",
    "worker",
    "yank",
]

data_option = click.option(
    "--data",
    "data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The marketplace's data folder (database and files) [env OPMARKET_DATA_DIR; "
    "default ./opmarket-data].",
)

#: Connections waiting to be accepted, as uvicorn's default.
_BACKLOG = 2048


def settings_from(**overrides: Any) -> Any:
    """The server's settings: ``overrides`` (those not None) over ``OPMARKET_*`` over the
    defaults; a UsageError naming the first setting that is not valid."""
    from pydantic import ValidationError

    from opmarket.web._settings import Settings

    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"setting {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def state_from(data: Path | None) -> Any:
    """The marketplace's state (database, files) in data folder ``data``, migrated."""
    settings = settings_from(data_dir=data)
    from opmarket.web._app import open_state

    try:
        return open_state(settings)
    except OSError as exc:  # a data folder that cannot be made or written
        raise UsageError(f"--data {settings.data_dir}: {exc.strerror or exc}") from None


def _default_shown(name: str, value: Any) -> str:
    """A setting's default as help shows it: ``100 MiB``, ``10``, ``none``."""
    from opmarket.web._settings import MiB

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value) if value not in ("", ()) else "none"
    if name.endswith("_bytes") and value >= MiB and value % MiB == 0:
        return f"{value // MiB} MiB"
    return f"{value:g}"


def _setting_options() -> list[click.Option]:
    """An option for each setting marked as a flag (``web._settings.FLAG``): named after the
    field (``header_timeout_s``: ``--header-timeout``), typed as it, its description and
    default (and the variable that sets it too) as its help. None when not given: the
    variable or the default applies."""
    from opmarket.web._settings import FLAG, Settings

    options = []
    for name, field in Settings.model_fields.items():
        if FLAG not in field.metadata:
            continue
        flag = "--" + name.removesuffix("_s").replace("_", "-")
        help_ = (
            f"{field.description} [env OPMARKET_{name.upper()}; "
            f"default {_default_shown(name, field.default)}]."
        )
        if typing.get_origin(field.annotation) is tuple:  # repeatable; none given: None
            options.append(
                click.Option(
                    [flag, name], multiple=True, help=help_, callback=lambda _c, _p, v: v or None
                )
            )
        else:
            options.append(click.Option([flag, name], type=field.annotation, help=help_))
    return options


class _SettingsCommand(click.Command):
    """A command that also takes the settings marked as flags, as options made from the
    settings model the first time its parameters are needed (so that listing the commands
    does not import the model's pydantic)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not getattr(self, "_with_settings", False):
            self.params[:0] = _setting_options()
            self._with_settings = True
        return super().get_params(ctx)


@click.command(cls=_SettingsCommand, context_settings=CONTEXT)
@data_option
@click.option(
    "--demo",
    is_flag=True,
    help="Build the first-party plugins, upload them through /legacy/, wait for their "
    "validation, then serve.",
)
def serve(data: Path | None, demo: bool, **flags: Any) -> None:
    """Serve the marketplace: the simple index, uploads, the catalog and its JSON API.

    The simple index at /simple/, uploads at /legacy/ (twine), the catalog at / and its JSON
    API at /api/ (OpenAPI at /docs). Each option also comes from its OPMARKET_* variable;
    an option given wins.

    \b
    Examples:
      opmarket serve --data ./market
      opmarket serve --demo
    """
    fresh = None
    if demo and data is None and "OPMARKET_DATA_DIR" not in os.environ:
        # Each demo serves the working tree as it is now: a new index per run (a file name
        # is never reused, so a kept one refuses every rebuilt wheel).
        import tempfile

        fresh = data = Path(tempfile.mkdtemp(prefix="opmarket-demo-"))
        # Stopped by SIGTERM too, the folder goes (the finally below); uvicorn raises the
        # signal again once it has shut down, which lands here.
        import signal

        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    settings = settings_from(data_dir=data, **flags)
    try:
        sock = _listen(settings.host, settings.port)  # before the demo's builds and "serving"
        with sock:  # open while uvicorn serves on it
            if fresh is not None:
                click.echo(
                    f"opmarket: demo data in {fresh} (removed on exit; --data keeps it)",
                    err=True,
                )
            _serve(settings, demo, sock)
    except KeyboardInterrupt:  # Ctrl-C, as uvicorn.run takes it: stopped, no "Aborted!"
        pass
    finally:
        if fresh is not None:
            import shutil

            shutil.rmtree(fresh, ignore_errors=True)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, bound as uvicorn binds (SO_REUSEADDR), of the
    address family ``socket.getaddrinfo`` gives the host (a name, an IPv4 or an IPv6
    address); port 0 takes a free port the system picks. A UsageError when it cannot be
    bound (in use, or not this machine's). Bound here, not by uvicorn, so that the port said
    in the "serving" line is the one bound, port 0 included."""
    sock: socket.socket | None = None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(_BACKLOG)  # from here on a client's connection waits to be answered
    except OSError as exc:  # socket.gaierror too: a name that does not resolve
        if sock is not None:
            sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "choose another port with --port N"
        ) from None
    sock.set_inheritable(True)  # the worker processes of --workers N serve on it too
    return sock


def _serve(settings: Any, demo: bool, sock: socket.socket) -> None:
    import uvicorn

    from opmarket.web._serverlog import log_to_stderr

    log_to_stderr()

    from opmarket.web._limits import LimitedHttpToolsProtocol

    host = f"[{settings.host}]" if ":" in settings.host else settings.host  # IPv6: [::1]
    url = f"http://{host}:{sock.getsockname()[1]}"  # the port bound, 0 or not
    if demo:
        from opmarket.cli._demo import run_demo

        run_demo(settings, sock, url)
        return
    # The one line that says where it listens (tests and scripts read the port from it).
    click.echo(f"opmarket: serving {settings.data_dir} on {url}/", err=True)
    # uvicorn.run as it runs, but on the socket bound here (uvicorn would bind its own).
    if settings.workers > 1:
        from uvicorn.supervisors import Multiprocess

        # Each worker process reads the same settings back from the environment.
        for key, value in settings.model_dump(exclude_defaults=True).items():
            shown = os.pathsep.join(value) if isinstance(value, tuple) else str(value)
            os.environ[f"OPMARKET_{key.upper()}"] = shown
        state_from(settings.data_dir)  # migrate once, before the workers start
        config = uvicorn.Config(
            "opmarket.web:app_from_environment",
            factory=True,
            workers=settings.workers,
            log_level="warning",
            http=LimitedHttpToolsProtocol,
        )
        Multiprocess(config, sockets=[sock]).run()
        return
    from opmarket.web._app import create_app

    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), log_level="warning", http=LimitedHttpToolsProtocol)
    )
    server.run(sockets=[sock])
    if not server.started:  # the app did not start (uvicorn has logged why)
        sys.exit(3)  # uvicorn's STARTUP_FAILURE, as uvicorn.run exits


@click.group()
def users() -> None:
    """Marketplace users (who may upload)."""


@users.command("add")
@click.argument("name")
@data_option
def users_add(name: str, data: Path | None) -> None:
    """Add the user NAME."""
    from opmarket.web._auth import add_user

    state = state_from(data)
    try:
        with state.db.transaction() as session:
            add_user(session, name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    click.echo(f"added user {name}")


@click.group()
def tokens() -> None:
    """API tokens for uploads (twine: user __token__, password the token)."""


@tokens.command("create")
@click.argument("name")
@click.option("--project", default=None, help="Limit the token to this project.")
@data_option
def tokens_create(name: str, project: str | None, data: Path | None) -> None:
    """Create an API token for user NAME; it is printed once, as the last line."""
    from opmarket.web._auth import create_token

    state = state_from(data)
    try:
        with state.db.transaction() as session:
            secret = create_token(session, name, project)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    scope = f" for project {project}" if project else " for all of its projects"
    click.echo(f"token for {name}{scope} (shown once; only its hash is stored):", err=True)
    click.echo(secret)


@click.command()
@click.argument("wheel", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--previous",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The previous release (a wheel or an op-set file) to check compatibility "
    "and the version bump against, as the index does with its last validated one.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def validate(wheel: Path, previous: Path | None, as_json: bool) -> None:
    """Validate WHEEL as the marketplace does on upload.

    Archive checks, install in isolation, discover the plugin, snapshot, conformance, compat
    and version policy.

    Exit code 0 when it would be listed (validated), 1 when rejected, 2 when unreadable.
    """
    from opmarket.web._status import FileStatus
    from opmarket.web.validation._pipeline import Previous, limits_from, validate_wheel

    if not wheel.is_file():
        raise UsageError(f"{wheel}: no such file")
    prior = None
    if previous is not None:
        prior = Previous(str(previous), _opset_text(previous))
    try:  # the server's limits, from OPMARKET_* as the server reads them
        settings = settings_from()
    except (UsageError, ImportError):  # no web extra: an author's machine; server defaults
        settings = None
    limits, wheel_limits = limits_from(settings)
    from opmarket.web.sandbox._run import sandbox_problem

    unsandboxed = sandbox_problem(limits)
    if unsandboxed:  # an author's own wheel on their own machine: run it, but say so
        click.echo(
            f"warning: no sandbox ({unsandboxed}); the wheel's code runs with your "
            "rights, files and network",
            err=True,
        )
        limits = dataclasses.replace(limits, allow_unsandboxed=True)
    verdict = validate_wheel(wheel, previous=prior, limits=limits, wheel_limits=wheel_limits)
    if as_json:
        click.echo(json.dumps(verdict.to_json(), indent=2))
    else:
        click.echo(verdict.log_text(), nl=False)
    if verdict.status is not FileStatus.VALIDATED:
        sys.exit(EXIT_PROBLEM)


def _gpu_worker(data: Path | None) -> None:
    from opmarket.web.gpu._worker import gpu_visible, run_gpu_worker

    gpus = gpu_visible()
    if not gpus:
        click.echo(
            "opmarket worker --gpu: no GPU visible on this machine (no NVIDIA GPU under "
            "/proc/driver/nvidia/gpus with a /dev/nvidia* device); GPU kernels stay "
            "'gpu: not run'",
            err=True,
        )
        sys.exit(EXIT_USAGE)
    import signal as signals

    state = state_from(data)
    stop = threading.Event()
    for sig in (signals.SIGINT, signals.SIGTERM):
        signals.signal(sig, lambda *_: stop.set())
    click.echo(f"opmarket: GPU conformance on {', '.join(gpus)}", err=True)
    run_gpu_worker(state, stop)


def _opset_text(path: Path) -> str:
    from opmarket.compat import load_source
    from opmarket.sdk import OpmarketError, opset_to_json

    try:
        return opset_to_json(load_source(str(path)).opset)
    except OpmarketError as exc:
        raise UsageError(f"--previous {path}: {exc}") from None


@click.command()
@click.argument("project")
@click.argument("version")
@click.option("--reason", default="", help="Why (shown to pip and uv users).")
@click.option("--undo", is_flag=True, help="Un-yank the release.")
@data_option
def yank(project: str, version: str, reason: str, undo: bool, data: Path | None) -> None:
    """Yank release VERSION of PROJECT (PEP 592): installers skip it unless pinned to it."""
    from opmarket.web._publish import set_yanked

    state = state_from(data)
    try:
        count = set_yanked(state, project, version, not undo, reason)
    except LookupError as exc:
        raise UsageError(str(exc)) from None
    click.echo(f"{'un-yanked' if undo else 'yanked'} {count} file(s) of {project} {version}")


@click.command()
@data_option
@click.option(
    "--threads",
    type=int,
    default=None,
    help="Validation threads [default: OPMARKET_VALIDATION_WORKERS or 1].",
)
@click.option(
    "--gpu",
    is_flag=True,
    help="Only the GPU conformance step of files that declare GPU kernels (needs a GPU; "
    "exit 2 without one). See docs/gpu.md.",
)
def worker(data: Path | None, threads: int | None, gpu: bool) -> None:
    """Validate uploads without serving: take jobs from the catalog's database.

    Until stopped (Ctrl-C). Run web servers with --validation-workers 0 and as many of these
    as you like.
    """
    import signal as signals

    if gpu:
        _gpu_worker(data)
        return

    from opmarket.web.validation._job import validation_worker

    state = state_from(data)
    count = threads if threads is not None else max(state.settings.validation_workers, 1)
    runner = validation_worker(state, count)
    stop = threading.Event()
    for sig in (signals.SIGINT, signals.SIGTERM):
        signals.signal(sig, lambda *_: stop.set())
    runner.start()
    click.echo(
        f"opmarket: validating jobs from {state.settings.database} with {count} thread(s)", err=True
    )
    while not stop.is_set():
        if runner.wait_ready(0.1):
            click.echo(
                f"opmarket: worker ready: {count} thread(s) with a started sandbox", err=True
            )
            break
    stop.wait()
    runner.stop()
