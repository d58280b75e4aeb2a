"""The command-line convention every command follows, and the ``ldp-beam`` entry point.

Every runnable module (``pipelines.*``, ``bench.*``, ``experiments.*``) builds its parser with
:func:`job_parser` and parses with :func:`parse_job_args`, in the manner of Beam's ``leader_board``
example: the job's own flags are parsed with ``parse_known_args``; whatever remains must be Apache Beam
pipeline options and becomes the job's ``PipelineOptions``. A flag that neither the job nor Beam knows
(``--window-size 600`` for ``--window_size 600``) is an error: one line on stderr, exit status 2, before
anything runs. Required flags are required, defaults show in ``--help``, and ``--log_level`` sets up
:mod:`logging`.

Flag names are shared across commands (underscores, never dashes)::

    --users N            number of simulated users
    --domain_size D      size of a categorical domain
    --seed S             the run's numpy SeedSequence entropy
    --task TASK.json     the collection task file
    --input GLOB         report files to read (an empty match is an error unless --allow_empty_input)
    --output DIR         output directory (a non-empty one is refused unless --overwrite)
    --input_topic T / --input_subscription S   Pub/Sub source of an aggregation job
    --output_topic T     Pub/Sub topic a job publishes to (the simulator's reports, a job's estimates)
    --log_level LEVEL    DEBUG, INFO, WARNING or ERROR

``ldp-beam <command> [flags]`` (the console script installed with the package) runs the same commands as
``python -m pipelines.<module> [flags]``; ``ldp-beam --help`` lists them. Each registered kind of task
(``ldp.kinds``) is a command, named by its entry: its job module (:data:`KIND_MODULES`), else the generic
job, :mod:`pipelines.job`.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import difflib
import importlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "COMMANDS",
    "GENERIC_JOB",
    "KIND_MODULES",
    "commands",
    "kind_commands",
    "JobArgumentParser",
    "OUTPUT_MARKER",
    "add_input_flags",
    "add_metrics_flags",
    "add_output_flags",
    "add_population_flags",
    "beam_option_parser",
    "check_input_pattern",
    "check_pubsub_path",
    "fail",
    "job_parser",
    "main",
    "parse_job_args",
    "prepare_output",
    "require_inputs",
    "runner_problem",
    "setup_logging",
    "write_json_or_fail",
]

_LOG = logging.getLogger(__name__)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

#: ``ldp-beam`` commands other than the kinds' jobs: name -> (module whose ``run(argv)`` is the command,
#: one-line summary). Each registered kind adds its job's command (:func:`commands`).
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "pipelines.simulate",
        "simulate a population's LDP reports for any task (Avro files or Pub/Sub)",
    ),
    "clients": (
        "pipelines.clients",
        "stateful simulated clients (secrets, memoized reports, budgets) reporting window after window",
    ),
    "shuffle": (
        "pipelines.shuffle",
        "the shuffler (its own trust domain): anonymous, permuted report batches per time bucket",
    ),
    "privacy": (
        "pipelines.privacy",
        "a task's privacy guarantees: local, and central per window and over windows when shuffled",
    ),
    "plan": (
        "pipelines.plan",
        "plan a collection before it starts: mechanism, eps0, predicted errors, central epsilon, window cost",
    ),
    "dashboard": ("pipelines.dashboard", "the live web dashboard over a latest-state store (--store URL)"),
    "dashboard-demo": (
        "pipelines.dashboard_demo",
        "clients, a streaming job, the store and the dashboard, end to end on 127.0.0.1",
    ),
    "demo": ("pipelines.demo_beam", "the end-to-end Beam demo (simulate + aggregate on the DirectRunner)"),
    "demo-core": ("pipelines.demo", "the same demo through the numpy core only (no Beam)"),
    "show": ("pipelines.show", "a job's results from its output directory: top values, intervals, counts"),
    "collect": (
        "pipelines.collect",
        "the HTTP collector: clients POST reports, checked ones become rolling Avro files a job reads",
    ),
}

#: The job modules of the built-in kinds, by kind name; any other registered kind's job is the generic one,
#: ``pipelines.job`` (``python -m pipelines.job KIND``).
KIND_MODULES: dict[str, str] = {
    "frequency": "pipelines.frequency",
    "range": "pipelines.range_queries",
    "batch_queries": "pipelines.batch_queries",
    "sparse": "pipelines.sparse_mean",
    "numeric": "pipelines.numeric",
}
#: The module of a kind without a job module of its own: ``run([KIND, *flags])``.
GENERIC_JOB = "pipelines.job"


def kind_commands() -> dict[str, str]:
    """Each registered kind's ``ldp-beam`` command (``ldp.kinds.Kind.command_name``) -> the kind's name."""
    from ldp.kinds import KINDS

    return {k.command_name: name for name, k in KINDS.items()}


def commands() -> dict[str, tuple[str, str]]:
    """Every ``ldp-beam`` command: ``simulate``, one per registered kind (its job module, or
    :data:`GENERIC_JOB`; the summary is the kind's description), then the rest of :data:`COMMANDS`."""
    from ldp.kinds import KINDS

    kinds = {
        command: (KIND_MODULES.get(name, GENERIC_JOB), KINDS[name].description or f"the {name} kind's job")
        for command, name in kind_commands().items()
    }
    first = {"simulate": COMMANDS["simulate"]}
    return {**first, **kinds, **{n: c for n, c in COMMANDS.items() if n not in first and n not in kinds}}


#: Written into every output directory a job prepares; ``--overwrite`` only clears directories carrying it.
OUTPUT_MARKER = ".ldp-beam-output.json"


class UsageError(Exception):
    """A command-line error, reported as one line and exit status 2."""


_CURRENT_PROG: str | None = None  # the running command's name, set by parse_job_args


#: Seconds a job stopped by SIGTERM has to unwind before its exit handlers run and it ends at once.
SIGTERM_GRACE_S = 20.0


@contextlib.contextmanager
def sigterm_unwinds(grace_s: float = SIGTERM_GRACE_S) -> Iterator[None]:
    """Inside the block, SIGTERM (a service manager's stop, ``kill PID``) raises ``SystemExit(143)`` in the
    main thread, so a job unwinds as from an interrupt: the store records the run failed, and the exit
    handlers stop the processes the job started (Beam's Prism job server, the Kafka bridge), which the
    default action (death on the spot) leaves running. If the process is still alive ``grace_s`` after
    the signal (a runner thread holding the exit), the exit handlers run and it ends at once, status 143.
    A second SIGTERM is ignored. Nothing changes outside the main thread or when SIGTERM already has a
    handler. A job on a Flink cluster keeps running there, as with the default action."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    fired: list[float] = []

    def on_term(signum: int, _frame: object) -> None:
        if fired:
            return
        fired.append(time.monotonic())
        sys.stderr.write("SIGTERM: stopping the job (its exit handlers stop the processes it started)\n")
        threading.Thread(target=_exit_after, args=(grace_s, 128 + signum), daemon=True).start()
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        if not fired:
            signal.signal(signal.SIGTERM, previous)


def _exit_after(seconds: float, status: int) -> None:
    time.sleep(seconds)
    sys.stderr.write(f"still running {seconds:g} s after SIGTERM: exit handlers, then exit {status}\n")
    try:
        atexit._run_exitfuncs()
    finally:
        os._exit(status)


def fail(message: str, code: int = 2, prog: str | None = None) -> NoReturn:
    """Prints ``PROG: error: MESSAGE`` (one line) to stderr and exits with ``code`` (``PROG``: the
    command being run, once :func:`parse_job_args` has run)."""
    prog = prog or _CURRENT_PROG
    prefix = f"{prog}: " if prog else ""
    print(f"{prefix}error: {message}", file=sys.stderr)
    raise SystemExit(code)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` for flags that have a default; not for unset ones or off switches."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class JobArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``PROG: error: ... (see --help)``), exit 2."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)", 2, self.prog)


def write_json_or_fail(flag: str, path: str, doc: object) -> None:
    """Writes ``doc`` as indented JSON to ``path`` (the value of ``flag``); a write that fails is a one-line
    error (:func:`fail`)."""
    try:
        Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"{flag} {path}: cannot write: {exc.strerror or exc}")


def _default_prog() -> str | None:
    """``ldp-beam CMD`` when run through the entry point (it sets ``sys.argv[0]``), ``python -m MODULE``
    when run as a module, else argparse's default."""
    if sys.argv and sys.argv[0].startswith("ldp-beam"):
        return sys.argv[0]
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if name:
        return f"python -m {name.removesuffix('.__main__')}"
    return None


_BEAM_EPILOG = (
    "Any Apache Beam pipeline option is accepted as well (anything else is an error), e.g. "
    "--runner=DirectRunner, --direct_running_mode=multi_processing --direct_num_workers=2, "
    "--runner=PortableRunner --job_endpoint=embed --environment_type=LOOPBACK, --runner=FlinkRunner, "
    "--runner=DataflowRunner --setup_file=./setup.py, --streaming."
)


def job_parser(
    description: str, *, prog: str | None = None, epilog: str | None = None, beam_options: bool = True
) -> JobArgumentParser:
    """A parser for one command: defaults shown in ``--help``, no abbreviated flags, one-line errors, and
    ``--log_level``. ``beam_options`` says whether the command takes Beam pipeline options (the epilog
    says so); a command that runs no pipeline passes False and parses with ``parse_job_args(...,
    beam=False)``."""
    text = epilog if epilog is not None else (_BEAM_EPILOG if beam_options else None)
    parser = JobArgumentParser(
        prog=prog or _default_prog(),
        description=description,
        epilog=text,
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--log_level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="logging level"
    )
    return parser


def add_population_flags(
    parser: argparse.ArgumentParser,
    *,
    users: int | None = 100_000,
    domain_size: int | None = None,
    seed: int | None = 0,
    domain_help: str = "size of the categorical domain",
) -> None:
    """``--users``, ``--domain_size`` and ``--seed``, the same names and meanings in every command. A
    ``None`` default makes ``--users`` / ``--seed`` required and leaves ``--domain_size`` unset (e.g. to
    take the task's)."""
    parser.add_argument(
        "--users", type=int, default=users, required=users is None, help="number of simulated users"
    )
    parser.add_argument("--domain_size", type=int, default=domain_size, help=domain_help)
    parser.add_argument(
        "--seed",
        type=int,
        default=seed,
        required=seed is None,
        help="entropy of the run's numpy SeedSequence (reproducible simulation)",
    )


def add_input_flags(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """``--input GLOB`` and ``--allow_empty_input`` (see :func:`require_inputs`)."""
    parser.add_argument(
        "--input", required=required, help="glob of Avro report files, e.g. 'DIR/*.avro' (quote it)"
    )
    parser.add_argument(
        "--allow_empty_input",
        action="store_true",
        help="accept an --input glob that matches no file (otherwise an error)",
    )


def _jsonl_max_values(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 (0: every value), got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port 0..65535 (0: a free one), got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    """``--metrics_port`` and ``--metrics_linger``: the job's Prometheus endpoint on 127.0.0.1
    (:mod:`transforms.prometheus`, docs/metrics.md)."""
    parser.add_argument(
        "--metrics_port",
        type=_port,
        metavar="PORT",
        help="serve the job's Prometheus metrics at http://127.0.0.1:PORT/metrics while it runs (0: a free "
        "port, printed); default: off (docs/metrics.md)",
    )
    parser.add_argument(
        "--metrics_linger",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="--metrics_port: seconds the endpoint keeps serving the job's final counts after it ends",
    )


def add_output_flags(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--output DIR`` and ``--overwrite`` (see :func:`prepare_output`), ``--jsonl_max_values``
    (``ldp.kinds.frequency.aggregate.estimate_json``), ``--store URL``,
    ``--store_max_items``, ``--store_retry_s`` and ``--store_allow_concurrent_runs`` (package ``store``)."""
    parser.add_argument("--output", required=required, help="output directory")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="clear an earlier run's non-empty --output directory first (otherwise refused)",
    )
    parser.add_argument(
        "--jsonl_max_values",
        type=_jsonl_max_values,
        default=4096,
        metavar="K",
        help="values per frequency row in the JSON Lines files: a larger domain's row holds its K largest "
        "estimates and their indices (the .avro files hold every value); 0: every value (default 4096)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="also write the latest-state store of estimates (docs/store.md): sqlite:///PATH or a file path "
        "(SQLite), postgresql://USER@HOST:PORT/DB (PostgreSQL); default: none",
    )
    parser.add_argument(
        "--store_max_items",
        type=int,
        default=4096,
        help="--store: numbers stored per window, output and group; beyond it the largest estimates",
    )
    parser.add_argument(
        "--store_retry_s",
        type=float,
        default=60.0,
        help="--store: seconds a failing store write is retried (backoff, reconnecting) before the job fails",
    )
    parser.add_argument(
        "--store_allow_concurrent_runs",
        action="store_true",
        help="--store: run even though another live run of the task writes to the store (default: refused)",
    )


def beam_option_parser() -> argparse.ArgumentParser:
    """An argument parser that knows every option of every ``PipelineOptions`` subclass Apache Beam
    defines (the standard, Google Cloud, worker, debug, setup, portable, Flink, Spark, Prism, direct, ...
    options), and only those: the set Beam's own parsers accept. Options declared by other packages'
    subclasses (a job's own ``PipelineOptions``) are not included, so a job's flags are never silently
    taken for Beam's."""
    from apache_beam.options import pipeline_options as po

    parser = _beam_flag_parser_class()(allow_abbrev=False, add_help=False, conflict_handler="resolve")
    seen: set[type] = set()
    todo = list(po.PipelineOptions.__subclasses__())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        if not cls.__module__.startswith("apache_beam.") or "_add_argparse_args" not in cls.__dict__:
            continue
        for group in getattr(parser, "_action_groups", ()):  # argparse checks conflicts per group
            group.conflict_handler = "resolve"
        cls._add_argparse_args(parser)
    from transforms.flink_options import FlinkCheckpointOptions  # the Flink runner's own, undeclared by Beam

    FlinkCheckpointOptions._add_argparse_args(parser)
    return parser


_BEAM_FLAG_PARSER: type | None = None


def _beam_flag_parser_class() -> type:
    """Beam's parser class (it adds ``add_value_provider_argument``), raising :class:`UsageError` instead
    of printing Beam's whole usage and exiting; built on first use so importing this module (and
    ``ldp-beam --help``) does not import Beam."""
    global _BEAM_FLAG_PARSER
    if _BEAM_FLAG_PARSER is None:
        from apache_beam.options.pipeline_options import _BeamArgumentParser

        class _BeamFlagParser(_BeamArgumentParser):
            def error(self, message: str) -> NoReturn:
                raise UsageError(message)

        _BEAM_FLAG_PARSER = _BeamFlagParser
    return _BEAM_FLAG_PARSER


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


#: Flags earlier versions used, and their names now (suggested when the new one exists in the command).
RENAMED_FLAGS = {
    "--n": "--users",
    "--d": "--domain_size",
    "--domain": "--domain_size",
    "--pubsub_topic": "--output_topic",
    "--zipf-s": "--zipf_exponent",
}


def _suggestion(flag: str, known: Sequence[str]) -> str:
    name = flag.split("=", 1)[0]
    if not name.startswith("--"):
        return ""
    if RENAMED_FLAGS.get(name) in known:
        return f"; did you mean {RENAMED_FLAGS[name]}?"
    underscored = "--" + name[2:].replace("-", "_")
    if underscored != name and underscored in known:
        return f"; did you mean {underscored}?"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def parse_job_args(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None = None,
    *,
    beam: bool = True,
    setup_log: bool = True,
) -> tuple[argparse.Namespace, Any]:
    """Parses ``argv`` (default ``sys.argv[1:]``): the job's flags into a namespace, the rest into
    ``PipelineOptions``.

    Anything that is neither the job's nor a Beam option is an error (one line, exit 2), with a suggestion
    for a near miss. A flag both the job and Beam declare (``--streaming``) is set in both.
    ``namespace.beam_args`` keeps the Beam flags as given (to pass on to another command's ``run``).
    ``beam=False``: the command runs no pipeline, every flag must be the job's and the second value is
    None. Sets up logging from ``--log_level`` unless ``setup_log`` is False.
    """
    global _CURRENT_PROG
    args = list(sys.argv[1:] if argv is None else argv)
    ns, rest = parser.parse_known_args(args)
    prog = _CURRENT_PROG = parser.prog
    if not beam:
        if rest:
            hint = _suggestion(rest[0], _option_strings(parser))
            parser.error(f"unrecognized arguments: {' '.join(rest)}{hint}")
        if setup_log:
            setup_logging(getattr(ns, "log_level", "INFO"))
        return ns, None
    beam_parser = beam_option_parser()
    try:
        _, unknown = beam_parser.parse_known_args(rest)
    except UsageError as exc:
        fail(f"Beam pipeline option: {exc} (see {prog} --help)", 2, prog)
    if unknown:
        flags = [a for a in unknown if a.startswith("-")]
        known = _option_strings(parser) + _option_strings(beam_parser)
        hint = _suggestion(flags[0], known) if flags else ""
        fail(
            f"unrecognized arguments: {' '.join(unknown)} (neither a flag of this command nor an Apache "
            f"Beam pipeline option){hint} (see {prog} --help)",
            2,
            prog,
        )
    from apache_beam.options.pipeline_options import PipelineOptions

    beam_dests = {a.dest for a in beam_parser._actions}
    overrides = {
        a.dest: getattr(ns, a.dest)
        for a in parser._actions
        if a.dest in beam_dests and a.option_strings and hasattr(ns, a.dest)
    }
    ns.beam_args = list(rest)  # the Beam flags as given, for a command that passes them on to a job
    options = PipelineOptions(rest, **overrides)
    why = runner_problem(options)
    if why is not None:
        fail(why, 2, prog)
    if setup_log:
        setup_logging(getattr(ns, "log_level", "INFO"))
    return ns, options


def runner_problem(options: Any) -> str | None:
    """Why ``--runner`` names no runner Beam could create (one line, with a near miss suggested), or None.

    Checked as Beam resolves the name (``apache_beam.runners.runner.create_runner``: a known runner's
    name in any case, with or without ``Runner``, or ``module.Class``), without creating the runner:
    a typo used to surface as a traceback from inside ``beam.Pipeline``."""
    from apache_beam.options.pipeline_options import StandardOptions

    runner = options.view_as(StandardOptions).runner
    if runner is None or not isinstance(runner, str):
        return None
    known = {path.rsplit(".", 1)[-1].lower(): path for path in StandardOptions.ALL_KNOWN_RUNNERS}
    name = runner.strip()
    if name.lower() in known or name.lower() + "runner" in known:
        return None
    if "." not in name:
        names = [path.rsplit(".", 1)[-1] for path in StandardOptions.ALL_KNOWN_RUNNERS]
        near = difflib.get_close_matches(name, names, n=1, cutoff=0.6) or difflib.get_close_matches(
            name.lower(), [n.lower() for n in names], n=1, cutoff=0.6
        )
        hint = ""
        if near:
            hint = f"; did you mean --runner={next(n for n in names if n.lower() == near[0].lower())}?"
        return (f"--runner={name!r} is not a Beam runner{hint} (known: {', '.join(sorted(set(names)))}; or "
                "the full module path of a PipelineRunner class)")
    module, _, cls = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), cls, None)
    except ImportError as exc:
        return f"--runner={name!r}: its module cannot be imported ({exc})"
    from apache_beam.runners.runner import PipelineRunner

    if not (isinstance(found, type) and issubclass(found, PipelineRunner)):
        return f"--runner={name!r}: {module} has no PipelineRunner class {cls!r}"
    return None


_OUR_LOGGERS = ("ldp", "transforms", "pipelines", "bench", "experiments", "__main__")
#: Beam's loggers whose INFO lines say what a job is and where it runs (job ids and states, the Dataflow
#: console URL, staging, job servers started and their jars, the Prism binary): shown at INFO, unlike the
#: rest of Beam (the FnApiRunner's INFO lines are one per stage).
_BEAM_INFO_LOGGERS = (
    "apache_beam.runners.dataflow",
    "apache_beam.runners.portability.portable_runner",
    "apache_beam.runners.portability.prism_runner",
    "apache_beam.runners.portability.flink_runner",
    "apache_beam.runners.portability.job_server",
    "apache_beam.utils.subprocess_server",
    "apache_beam.runners.direct.direct_runner",
    "PrismRunner",
)
_HANDLER: logging.Handler | None = None


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not the stream at creation): a test
    runner's captured stream may be closed by the time Beam logs from an exit hook."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; the property decides
        pass


def setup_logging(level: str | int = "INFO") -> None:
    """Logs ``LEVEL message`` lines with a timestamp to stderr. Our packages log at ``level``; Apache Beam
    and its dependencies log warnings and errors only, unless ``level`` is DEBUG (their INFO lines are the
    runner's internals, one per stage), except Beam's launch lines (job ids and states, the Dataflow
    console URL, job servers: ``_BEAM_INFO_LOGGERS``), which show at INFO."""
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else int(level)
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; choose one of {', '.join(LOG_LEVELS)}")
    global _HANDLER
    root = logging.getLogger()
    for h in list(root.handlers):
        # ours from an earlier call, and plain stderr handlers a logging.basicConfig() (Beam calls it) made;
        # handlers of other kinds (a test runner's capture) stay
        if h is _HANDLER or type(h) is logging.StreamHandler:
            root.removeHandler(h)
    _HANDLER = _StderrHandler()
    _HANDLER.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    root.addHandler(_HANDLER)
    others = numeric if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
    logging.getLogger().setLevel(others)
    for name in _OUR_LOGGERS:
        logging.getLogger(name).setLevel(numeric)
    for name in _BEAM_INFO_LOGGERS:
        logging.getLogger(name).setLevel(numeric if numeric <= logging.INFO else others)


def require_inputs(pattern: str | None, allow_empty: bool = False, *, flag: str = "--input") -> list[str]:
    """The files ``pattern`` (a glob, local or any filesystem Beam knows, e.g. ``gs://``) matches, sorted.
    Errors (one line, exit 2): no pattern; a pattern matching nothing (unless ``allow_empty``); a
    directory (not a report file: give ``DIR/*.avro``); a glob matching a symbolic link whose target is
    missing (Beam would skip it without a word)."""
    check_input_pattern(pattern, flag=flag)
    assert pattern is not None
    from apache_beam.io.filesystems import FileSystems

    try:
        matched = FileSystems.match([pattern])[0].metadata_list
    except Exception as exc:  # Beam raises BeamIOError for a bad scheme or an unreadable directory
        fail(f"{flag} {pattern!r}: {exc}")
    paths = sorted(m.path for m in matched)
    if _is_local(pattern):  # (Beam's local glob matching lists files only, never directories)
        from transforms.io import dangling_links

        dangling = dangling_links(pattern)
        if dangling:
            (link, target), more = dangling[0], len(dangling) - 1
            fail(f"{flag} {pattern!r} matches the dangling symbolic link {link!r} -> {target!r} (its target "
                 f"does not exist{f'; and {more} more' if more else ''}): restore or remove it")
    if not paths and not allow_empty:
        fail(f"{flag} {pattern!r} matches no file (check the path and quote the glob)")
    _LOG.debug("%s %r matches %d file(s)", flag, pattern, len(paths))
    return paths


def check_input_pattern(pattern: str | None, *, flag: str = "--input") -> None:
    """The checks of an ``--input`` glob that hold for a watched directory too (which may still be empty):
    a pattern is given, and it is not a directory (one line naming the glob to give; exit 2)."""
    if not pattern:
        fail(f"{flag} is required")
    if _is_local(pattern) and os.path.isdir(pattern):
        example = os.path.join(pattern, "*.avro")
        fail(f"{flag} {pattern!r} is a directory; give a glob of its report files, e.g. {flag} {example!r}")


#: A Google Cloud project id: 6 to 30 lowercase letters, digits and hyphens, starting with a letter and
#: not ending with a hyphen.
PUBSUB_PROJECT_RE = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
#: A Pub/Sub topic or subscription id: 3 to 255 letters, digits and ``-_.~+%``, starting with a letter.
PUBSUB_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9._~+%-]{2,254}")


def check_pubsub_path(value: str | None, kind: str, *, flag: str) -> None:
    """A Pub/Sub resource path ``projects/PROJECT/{kind}s/NAME`` (``kind``: ``topic`` or
    ``subscription``), checked before anything runs: a bad one is one line naming the rule, exit 2
    (the client library would fail later with a long traceback)."""
    if value is None:
        return
    parts = value.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != f"{kind}s":
        fail(f"{flag} {value!r} is not a Pub/Sub {kind} path: give projects/PROJECT/{kind}s/NAME")
    project, name = parts[1], parts[3]
    if not PUBSUB_PROJECT_RE.fullmatch(project):
        fail(f"{flag} {value!r}: {project!r} is not a valid project id (6 to 30 lowercase letters, digits "
             "or hyphens, starting with a letter, not ending with a hyphen)")
    if not PUBSUB_NAME_RE.fullmatch(name) or name.startswith("goog"):
        fail(f"{flag} {value!r}: {name!r} is not a valid {kind} id (3 to 255 letters, digits or -_.~+%, "
             "starting with a letter, not with 'goog')")


def _is_local(path: str) -> bool:
    return "://" not in path


def prepare_output(path: str | None, overwrite: bool = False, *, flag: str = "--output") -> str:
    """Makes ``path`` ready for a job's output and returns it.

    A missing directory is created; an empty one (or one holding only the marker) is used. A non-empty one
    is refused (one line, exit 2) so that two runs never mix, unless ``overwrite``: then it is cleared
    first, but only when it carries the marker file an earlier ldp-beam job left (:data:`OUTPUT_MARKER`),
    never an arbitrary directory.
    The marker (command line, package version, time) is written into the prepared directory.
    """
    if not path:
        fail(f"{flag} is required")
    if not _is_local(path):
        return _prepare_remote_output(path, overwrite, flag)
    if os.path.exists(path) and not os.path.isdir(path):
        fail(f"{flag} {path!r} exists and is not a directory")
    entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
    if entries == [OUTPUT_MARKER]:  # prepared by an earlier run that wrote nothing: nothing to mix with
        entries = []
    if entries:
        if not overwrite:
            example = next((e for e in entries if e != OUTPUT_MARKER), entries[0])
            fail(
                f"{flag} {path!r} is not empty ({len(entries)} entries, e.g. {example!r}); choose a new "
                f"directory or pass --overwrite to replace an earlier run's output"
            )
        if OUTPUT_MARKER not in entries:
            fail(
                f"{flag} {path!r} is not empty and was not written by an ldp-beam job (no {OUTPUT_MARKER}); "
                f"refusing to delete it even with --overwrite"
            )
        _LOG.warning("--overwrite: clearing %d entries of %s", len(entries), path)
        for name in entries:
            target = os.path.join(path, name)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            else:
                os.remove(target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, OUTPUT_MARKER), "w", encoding="utf-8") as fh:
        json.dump(_marker(), fh)
        fh.write("\n")
    return path


def _marker() -> dict[str, Any]:
    from ldp import __version__

    return {
        "command": [os.path.basename(sys.argv[0]) if sys.argv else "", *sys.argv[1:]],
        "version": __version__,
        "created_unix_s": round(time.time(), 3),
    }


def _prepare_remote_output(path: str, overwrite: bool, flag: str) -> str:
    from apache_beam.io.filesystems import FileSystems

    base = path.rstrip("/")
    existing = [m.path for m in FileSystems.match([base + "/**"])[0].metadata_list]
    if existing:
        if not overwrite:
            fail(f"{flag} {path!r} is not empty ({len(existing)} files); choose a new path or --overwrite")
        marker = FileSystems.join(base, OUTPUT_MARKER)
        if marker not in existing:
            fail(f"{flag} {path!r} was not written by an ldp-beam job (no {OUTPUT_MARKER}); not deleting it")
        _LOG.warning("--overwrite: deleting %d files under %s", len(existing), path)
        FileSystems.delete(existing)
    with FileSystems.create(FileSystems.join(base, OUTPUT_MARKER)) as fh:
        fh.write((json.dumps(_marker()) + "\n").encode())
    return path


def _usage() -> str:
    every = commands()
    width = max(len(n) for n in every)
    lines = [
        "usage: ldp-beam <command> [flags]     (ldp-beam <command> --help for a command's flags)",
        "",
        "Local differential privacy analytics on Apache Beam. Commands:",
    ]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in every.items()]
    modules = [m for m, _ in every.values() if m != GENERIC_JOB]
    lines += ["", "Each command is also `python -m <module>`: " + ", ".join(modules)]
    generic = [c for c, (m, _) in every.items() if m == GENERIC_JOB]
    if generic:
        lines.append(f"(the job of a kind without a module of its own: `python -m {GENERIC_JOB} KIND`: "
                     + ", ".join(generic) + ")")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``ldp-beam`` console script: ``ldp-beam <command> [flags]`` runs ``<module>.run(flags)``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] == "--version":
        from ldp import __version__

        print(f"ldp-beam {__version__}")
        return 0
    name, rest = args[0], args[1:]
    every = commands()
    if name not in every:
        close = difflib.get_close_matches(name, list(every), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        fail(f"unknown command {name!r}{hint} (ldp-beam --help lists them)", 2, "ldp-beam")
    module = importlib.import_module(every[name][0])
    saved, sys.argv = sys.argv, [f"ldp-beam {name}", *rest]
    if every[name][0] == GENERIC_JOB:
        rest = [kind_commands()[name], *rest]
    try:
        result = module.run(rest)
    finally:
        # Beam's PipelineOptions() without flags reads sys.argv: a caller in the same process (a test, an
        # embedding program) must not inherit this command's flags
        sys.argv = saved
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


if __name__ == "__main__":
    raise SystemExit(main())
