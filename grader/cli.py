"""The ``jaxgrade`` command line: ``check``, ``grade``, ``export``, ``post``, ``gradescope``, ``release``,
``new``, ``validate``, ``list``.

The library never prints; this module does (and the check server's client, which writes what a
server running this module sent back: grader/grading/check_server.py).  ``main(argv) -> int`` is
the testable entry point (the ``jaxgrade`` command is :func:`grader.entry.main`), and
:func:`_fail` is the one place that turns an expected error into a message and a TIP.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from packaging.requirements import Requirement
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from grader import __version__
from grader.batch.gradebook import Gradebook, GradebookError
from grader.course import scaffold
from grader.course.config import (
    COURSE_FILE,
    Assignment,
    BrokenTestsError,
    CanvasConfig,
    ConfigError,
    NoCourseError,
    UnknownAssignmentError,
    UnmetRequirementError,
    check_requirements,
    find_course_root,
    load_course,
)
from grader.errors import cell_paths_named
from grader.grading import check_server
from grader.grading.record import Record
from grader.host import xla_flags
from grader.host.sandbox import (
    SandboxSetupError,
    choose_isolation,
    isolation_warning,
    remove_own_scratch,
    resource_warning,
)
from grader.intake.collect import Incoming, IntakeError, IntakeReport, collect
from grader.intake.notebook import NotebookError, assignment_named_in, load_notebook
from grader.publish import canvas, exports
from grader.publish.output import terminal_safe, write_atomic

# Commands that grade import the grading machinery (pytest, the checks) when they run, so that
# `jaxgrade --help`, `list` and `export` start in a fraction of the time.
if TYPE_CHECKING:
    from grader.batch.run import Batch

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message, self.tip = message, tip


def _fail(exc: CliError | ConfigError, err: TextIO) -> int:
    if isinstance(exc, CliError):
        print(f"jaxgrade: error: {terminal_safe(exc.message)}", file=err)  # it may name a student's file
        if exc.tip:
            print(f"TIP: {terminal_safe(exc.tip)}", file=err)
    elif isinstance(exc, UnmetRequirementError):
        print(f"jaxgrade: error: {exc}", file=err)
        wanted = " ".join(f"'{req}'" for req in exc.unmet)
        jax = any(Requirement(r).name in ("jax", "jaxlib") for r in exc.unmet)
        python = "; JAX 0.7 and later need Python 3.11 or newer" if jax and sys.version_info < (3, 11) else ""
        print(f"TIP: install it where jaxgrade runs (`pip install {wanted}`{python}).", file=err)
    elif isinstance(exc, UnknownAssignmentError):
        print(f"jaxgrade: error: {exc}", file=err)
        print("TIP: check the assignment's name (`jaxgrade list` shows the course's assignments).", file=err)
    elif isinstance(exc, BrokenTestsError):
        print(f"jaxgrade: error: {exc}", file=err)
        print(
            f"TIP: fix the test file named above; `jaxgrade validate {exc.assignment}` checks the tests against "
            "the reference, the starter and the mutants."
            if exc.staff
            else "TIP: the tests handed out with the assignment are broken: tell the course staff, or download "
            "the assignment again.",
            file=err,
        )
    else:
        print(f"jaxgrade: error: {exc}", file=err)
        print("TIP: fix the named setting and run the command again.", file=err)
    return EXIT_USAGE


NO_COURSE_TIP = (
    "Run it inside the folder your course gave you for this assignment (made by `jaxgrade release`: it holds "
    "grading.yaml, assignment.yaml and tests/), or pass --course DIR, or check inside the notebook: run its "
    "first cell, then `jc.check()` in a cell."
)


_NOTED: set[Path] = set()  # the courses this process said it uses from where jaxgrade is installed


def _course(args: argparse.Namespace, start: Path | None = None) -> Path:
    """The course directory: --course, else found from ``start`` (default: the working directory)."""
    if args.course:
        root = Path(args.course).resolve()
        if not (root / COURSE_FILE).is_file():
            raise CliError(
                f"--course {args.course}: no {COURSE_FILE} there",
                "Pass the course repository (it holds grading.yaml and assignments/), or an assignment folder "
                "made by `jaxgrade release`.",
            )
        return root
    try:
        root = find_course_root(start)
    except NoCourseError as exc:
        raise CliError(str(exc), NO_COURSE_TIP) from None
    here = (Path.cwd() if start is None else Path(start)).resolve()
    if root not in (here, *here.parents) and root not in _NOTED:  # an editable install's own course repository
        _NOTED.add(root)
        print(
            f"note: no {COURSE_FILE} in {here} or its parents: using the course jaxgrade is installed from, {root} "
            "(--course DIR names another)",
            file=sys.stderr,
        )
    return root


def _assignment(args: argparse.Namespace, name: str, *, staff: bool = True, start: Path | None = None) -> Assignment:
    """The assignment to grade (or check, or validate): refused at once where the installed
    packages cannot grade it (its ``requires``).  A check (``staff=False``) needs no starter
    notebook: a student who renamed theirs (``autodiff_JaneDoe.ipynb``) has none in the folder."""
    assignment = load_course(_course(args, start)).assignment(name, staff=staff, starter=staff)
    check_requirements(assignment)
    return assignment


@contextlib.contextmanager
def _stops(*signals: int) -> Iterator[Callable[[], None]]:
    """While in the block, each of ``signals`` raises KeyboardInterrupt at once, as Python's
    Ctrl-C does, and asks the stop of grader/host/interrupts.py too: a handler may run inside a
    garbage collector's callback (JAX has one), which drops what it raises, and the asked stop
    still ends the wait on a sandbox that is going on, or the next, so the notebook being graded
    stops too.  The function given raises KeyboardInterrupt when a stop was asked: call it where
    the work may stop.  Only in the main thread (elsewhere no handler can be set), and SIGINT
    only where it is Python's Ctrl-C: a command started with it ignored (a background job of a
    shell that is not interactive) keeps ignoring the Ctrl-C meant for the foreground."""
    import threading

    from grader.host import interrupts

    def stopped() -> None:
        if interrupts.requested():
            raise KeyboardInterrupt

    ours = [
        sig
        for sig in signals
        if threading.current_thread() is threading.main_thread()
        and (sig != signal.SIGINT or signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    ]
    before: dict[int, Any] = {}
    if ours:
        interrupts.clear()  # a stop asked before the block is not this block's
    try:
        for sig in ours:
            before[sig] = signal.signal(sig, interrupts.stop)
        yield stopped
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        if ours:
            interrupts.clear()  # the stop is done


# --------------------------------------------------------------------------- check


def missing_why(live: bool) -> str:
    """Why a function is missing: a check runs the notebook from the top; the self-check (``live``)
    looks in the student's kernel as it is now."""
    if live:
        return "not defined in this kernel now: run the cell that defines it"
    return "not defined when the notebook runs top to bottom"


def render_check(rec: Record, out: TextIO, *, live: bool = False) -> None:
    """The text `jaxgrade check` prints (the in-notebook self-check shows the same)."""
    print(f"jaxgrade check: {rec.source} — assignment {rec.assignment} (public tests)", file=out)
    if rec.message:
        print(f"  note: {rec.message}", file=out)
    if rec.status == "error" and not rec.tests:
        return
    for c in rec.cells:
        where = f"cell {c['index'] + 1}"
        if c.get("line") and c.get("line_cell") is not None:
            where += f" (line {c['line']} of cell {c['line_cell'] + 1})"
        elif c.get("line"):
            where += f", line {c['line']}"
        what = (
            f"{c.get('ename')}: {cell_paths_named(str(c.get('evalue', '')))}"
            if c.get("ename")
            else c.get("message", c["status"])
        )
        if c.get("strays"):
            what += f" (left {c['strays']} process(es) running; they were killed)"
        src = f"  `{c['source']}`" if c.get("source") else ""
        print(f"  {where}: {c['status']}: {what.splitlines()[0] if what else ''}{src}", file=out)
    if rec.missing:
        print(f"  missing: {', '.join(rec.missing)} ({missing_why(live)})", file=out)
    print(file=out)
    for t in rec.tests:
        mark = "PASS" if t.status == "passed" else ("ERROR" if t.status == "error" else "FAIL")
        title = f" — {t.title}" if t.title else ""
        print(f"  {mark:5} {t.name} [{t.category}] {t.score:g}/{t.max_score:g}{title}", file=out)
        if t.status != "passed":
            print(f"        {t.message}", file=out)
            if t.hint:
                print(f"        hint: {t.hint}", file=out)
    passed = sum(t.status == "passed" for t in rec.tests)
    print(file=out)
    print(f"{passed}/{len(rec.tests)} public tests passed ({rec.score:g}/{rec.max_score:g} points).", file=out)
    print(HIDDEN_TESTS_NOTE, file=out)  # always: passing the public tests is not the grade


#: What every check says, however the public tests went.
HIDDEN_TESTS_NOTE = (
    "These are the public tests only: hidden tests check more, on other inputs, when your work is graded."
)


@contextlib.contextmanager
def _still_checking(assignment: Assignment, err: TextIO) -> Iterator[None]:
    """A check that takes longer than :data:`STILL_CHECKING_AFTER` says so once, and why it may:
    a student whose cell loops forever waited a minute in silence (a walkthrough)."""
    with check_server.still_checking(err, f"after {assignment.limits.cell_timeout:g} s"):
        yield


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.grading.grade import grade_many

    path = Path(args.notebook)
    if not path.is_file():
        raise CliError(f"{path}: no such file", "Pass the path of your notebook, e.g. `jaxgrade check hw.ipynb`.")
    name = args.assignment
    if name is None:
        try:
            name = load_notebook(path).assignment
        except NotebookError as exc:
            raise CliError(
                str(exc), "Open the notebook in Jupyter and save it again, or re-download the starter."
            ) from None
        if name is None:
            raise CliError(
                f"{path}: the notebook does not say which assignment it is (no 'jaxgrade' metadata)",
                "Pass it explicitly: `jaxgrade check NOTEBOOK --assignment NAME` (see `jaxgrade list`).",
            )
    # the notebook's own folder first: a student bundle, wherever the command runs from
    try:
        assignment = _assignment(args, name, staff=False, start=path.resolve().parent)
    except UnknownAssignmentError:
        if args.assignment is not None:
            raise
        course = load_course(_course(args, path.resolve().parent))
        raise CliError(
            f"{path.name} says it is assignment {name!r} (its metadata), and the course here "
            f"({course.root}) has no such assignment: it has {', '.join(sorted(course.assignments))}",
            f"Check it in the folder your course gave you for {name!r}, or pass --assignment NAME.",
        ) from None
    _warn_isolation(args.isolation, err)
    if args.watch:
        return _watch(args, assignment, path, out, err)
    if check_server.serving():  # in a check server: the sandbox it started ahead, if it fits
        from grader.grading.grade import grade_one, ready_ahead

        session = ready_ahead(
            check_server.take_ahead(assignment, path, args.isolation), assignment, path, args.isolation
        )
        # (the client says it is still checking: what is written here reaches it only at the end)
        rec = grade_one(assignment, path, public_only=True, isolation=args.isolation, session=session)
    else:
        # a Ctrl-C whose KeyboardInterrupt JAX's gc callback drops (this process loads JAX to
        # grade) still stops the check, at its next wait on the sandbox (_stops)
        with _still_checking(assignment, err), _stops(signal.SIGINT) as stopped:
            rec = grade_many(assignment, [path], jobs=1, public_only=True, isolation=args.isolation)[path]
            stopped()
        if not args.no_server:
            devices = assignment.config.devices
            if check_server.start(assignment.course.root, assignment.name, path, args.isolation, devices):
                print(
                    f"(a checker stays ready in the background for {check_server.idle_seconds() / 60:g} min, "
                    "so that your next check is faster; --no-server or JAXGRADE_CHECK_SERVER=0 to do without)",
                    file=err,
                )
    if args.json:
        print(rec.to_json(), file=out)
    else:
        render_check(rec, out)
    ok = rec.status == "graded" and bool(rec.tests) and all(t.status == "passed" for t in rec.tests)
    return EXIT_OK if ok else EXIT_FAIL


#: How often `check --watch` looks at the notebook (seconds).
WATCH_POLL = 0.2


def _watch(args: argparse.Namespace, assignment: Assignment, path: Path, out: TextIO, err: TextIO) -> int:
    """`jaxgrade check --watch`: check the notebook, then again each time it is saved, with the
    next sandbox started ahead (kernel up, JAX imported) while the student edits; Ctrl-C (or
    closing the terminal) stops it, and it exits 0."""
    import hashlib

    from grader.grading.grade import _set_trusted_devices, grade_one, prestart, ready_ahead

    def fingerprint() -> tuple[int, ...] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size

    def settled() -> bytes | None:
        """The notebook's bytes; an editor caught writing it (not JSON yet) is given a moment."""
        for _ in range(10):
            try:
                data = path.read_bytes()
            except OSError:
                return None
            try:
                json.loads(data)
                return data
            except ValueError:
                time.sleep(WATCH_POLL)
        return data  # still not JSON: the check says so

    # the checks run in this process (no pool): its JAX gets the assignment's device count first
    name, devices = assignment.name, assignment.config.devices
    _set_trusted_devices(devices, fast_compile=True)
    checked: str | None = None  # sha256 of the bytes last checked
    ahead = session = None
    print(f"jaxgrade check --watch: checking {path} each time it is saved; Ctrl-C to stop", file=err)
    # Ctrl-C, a closed terminal or a kill: clean up as for Ctrl-C; a signal dropped in a gc
    # callback stops a running check at its next wait on the sandbox, and the loop at its next look
    with _stops(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as stopped:
        try:
            while True:
                stopped()
                seen = fingerprint()
                data = settled()
                digest = hashlib.sha256(data).hexdigest() if data is not None else None
                if digest is not None and digest != checked:
                    # read again for each check: edits to the tests count
                    assignment = _assignment(args, name, staff=False, start=path.resolve().parent)
                    if assignment.config.devices != devices:
                        raise CliError(
                            f"the assignment's device count changed ({devices} to {assignment.config.devices})",
                            "Stop --watch (Ctrl-C) and start it again.",
                        )
                    session, ahead = ready_ahead(ahead, assignment, path, args.isolation), None
                    t0 = time.monotonic()
                    # a bug of ours is said as a plain check says it (grader_error), and the watch goes on
                    with _still_checking(assignment, err):
                        rec = grade_one(assignment, path, public_only=True, isolation=args.isolation, session=session)
                    session = None  # grade_notebook closed it
                    checked = digest
                    if args.json:
                        print(json.dumps(rec.to_dict(), ensure_ascii=False, allow_nan=False, default=str), file=out)
                    else:
                        render_check(rec, out)
                        print(
                            f"— checked in {time.monotonic() - t0:.1f}s; watching {path} (Ctrl-C to stop)\n", file=out
                        )
                    out.flush()
                    stopped()  # not a sandbox started for a watch that is over
                    ahead = prestart(assignment, path, args.isolation)  # for the next save
                while fingerprint() == seen:
                    stopped()
                    time.sleep(WATCH_POLL)
        except KeyboardInterrupt:
            print("jaxgrade check --watch: stopped", file=err)
            return EXIT_OK
        finally:
            for started in (ahead, session):
                if started is not None:
                    started.close()
            remove_own_scratch()  # one made just as Ctrl-C came, before its session knew it


# --------------------------------------------------------------------------- grade


def cmd_grade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:

    assignment = _assignment(args, args.assignment)
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"{out_dir}: not a directory", "Pass a directory for --out (it is created if needed).")
    _one_assignment_per_folder(out_dir, assignment.name)
    from grader.grading.grade import collect_points

    collect_points(assignment)  # tests that cannot be collected stop it here, before any file is made
    made = next((d for d in (out_dir.absolute(), *out_dir.absolute().parents) if d.parent.exists()), None)
    made = made if made is not None and not made.exists() else None
    # the folder holds students' notebooks, names and grades: made private (the TA may open it up)
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        return _grade_into(args, assignment, out_dir, err)
    except (CliError, ConfigError):
        _unmake(out_dir, made)  # stopped before anything was graded: nothing left behind
        raise


def _grade_into(args: argparse.Namespace, assignment: Assignment, out_dir: Path, err: TextIO) -> int:
    try:
        intake = collect(
            [Path(s) for s in args.submissions], out_dir / "submissions", own_names=[assignment.starter.stem]
        )
    except IntakeError as exc:
        raise CliError(exc.message, exc.tip) from None
    for line in intake.lines():
        print(terminal_safe(line), file=err)
    if not intake.submissions:
        raise CliError("no submissions found", "Pass notebooks (.ipynb), folders that contain them, or an LMS zip.")
    if not args.any_metadata:
        _named_as_asked(assignment, intake.submissions, err)
    stops: tuple[type[Exception], ...] = ()
    if args.scheduler:
        stops = _cluster_stops(args.isolation, err)
    else:
        _warn_isolation(args.isolation, err)
    from grader.batch.run import Batch, DiskFull

    batch = Batch(assignment, out_dir, isolation=args.isolation, cache=args.cache, scheduler=args.scheduler)
    try:
        return _grade_batch(batch, intake, args, out_dir, err)
    except (DiskFull, *stops) as exc:
        # after the abort: no work is left running, and the gradebook holds every result so far
        print(f"jaxgrade: error: {exc.message}", file=err)
        print(f"TIP: {exc.tip}", file=err)
        return EXIT_FAIL


def _unmake(out_dir: Path, made: Path | None) -> None:
    """Remove what a run that stopped before grading made: ``made`` is the first folder of the
    ``--out`` path that it created (``out_dir`` or a parent; None when ``out_dir`` was there).
    Everything below it is this run's: the notebooks it extracted from the downloads and empty
    folders.  A folder that holds anything else stays."""
    if made is None:
        return
    out_dir = out_dir.absolute()
    staging = out_dir / "submissions"
    if staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging, ignore_errors=True)  # copies of what the downloads hold, made by this run
    for folder in sorted((p for p in out_dir.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only an empty one
    for folder in (out_dir, *out_dir.parents):
        with contextlib.suppress(OSError):
            folder.rmdir()
        if folder == made:
            break


def _one_assignment_per_folder(out_dir: Path, name: str) -> None:
    """Refuse an ``--out`` that holds another assignment's results: its ``results/``,
    ``feedback/``, report and grades table are named by student only, so grading a second
    assignment there would replace the first one's pages (a student sent the wrong page)."""
    db = out_dir / "gradebook.db"
    if not db.is_file():
        return
    try:
        with Gradebook(db) as gb:
            others = [a for a in gb.assignments() if a != name]
    except GradebookError as exc:
        raise CliError(str(exc), "Pass another --out directory.") from None
    if others:
        raise CliError(
            f"{out_dir} holds the results of {', '.join(map(repr, others))}: its results, feedback pages, "
            f"report and grades table are that assignment's",
            f"Grade {name!r} into a folder of its own, e.g. --out {out_dir.parent / (out_dir.name + '-' + name)}.",
        )


#: Submissions whose metadata :func:`_named_as_asked` reads: enough to tell a wrong --assignment.
NAMED_SAMPLE = 20
#: The largest file whose metadata :func:`_named_as_asked` reads.  JSON of many small values
#: takes about 20 times its size to hold once parsed (64 MiB of ``[],`` is 1.4 GB of lists), and
#: this process has no memory limit of its own; a starter with its outputs is a few hundred KB.
#: A larger notebook is graded all the same; the next one under the size is read in its place.
NAMED_MAX_BYTES = 4 << 20
#: Notebooks that must agree before a batch is stopped: the metadata is the students' to write,
#: and one or two of them must not keep their own notebooks from being graded.
NAMED_MIN = 3


def _named_as_asked(assignment: Assignment, submissions: list[Incoming], err: TextIO) -> None:
    """Stop before grading when the notebooks say they are another assignment of the course
    (their ``jaxgrade.assignment`` metadata, set in the starter): at least :data:`NAMED_MIN` and
    most of the first :data:`NAMED_SAMPLE` files of at most :data:`NAMED_MAX_BYTES` that name one
    name the same other one.  Graded as the
    asked one, each would get 0 with a note in the grades table only.  Fewer are named in a
    warning, and graded.  Not when the asked assignment's own starter names another (the metadata
    then says nothing)."""
    try:
        if load_notebook(assignment.starter).assignment not in (None, assignment.name):
            return
    except NotebookError:
        pass
    names: Counter[str] = Counter()
    read = 0
    for sub in submissions:
        if read == NAMED_SAMPLE:
            break
        try:
            if sub.path.stat().st_size > NAMED_MAX_BYTES:
                continue
            read += 1
            named = assignment_named_in(sub.path.read_bytes())
        except (OSError, MemoryError):  # a student's file
            continue
        if named is not None:
            names[named] += 1
    if not names:
        return
    (other, count), total = names.most_common(1)[0], sum(names.values())
    if other == assignment.name or other not in assignment.course.assignments or 2 * count <= total:
        return
    if count < NAMED_MIN:
        print(
            f"warning: {count} of the {total} notebook(s) checked say they are assignment {other!r} (their "
            f"metadata); they are graded as {assignment.name!r}, as asked (--assignment {other} if they are {other!r})",
            file=err,
        )
        return
    raise CliError(
        f"{count} of the {total} notebook(s) checked say they are assignment {other!r} (their metadata), "
        f"not {assignment.name!r}: graded as {assignment.name!r}, each would get 0",
        f"Grade them with --assignment {other}; or, if they are {assignment.name!r} whatever their metadata "
        "says, add --any-metadata.",
    )


def _cluster_stops(isolation: str, err: TextIO) -> tuple[type[Exception], ...]:
    """Check that Dask is installed; the errors that stop a batch on a cluster.  The workers
    sandbox the notebooks, so this machine's bubblewrap does not matter."""
    if importlib.util.find_spec("distributed") is None:
        raise CliError(
            "--scheduler grades on a Dask cluster, but Dask's distributed package is not installed",
            "Install it with `pip install 'jaxgrade[dask]'` (here and on the workers).",
        )
    from grader.batch.cluster import ClusterError

    if isolation == "process":
        print(
            "warning: --isolation process: the workers will run student code in plain subprocesses, "
            "without bubblewrap (limits, but no filesystem or network isolation)",
            file=err,
        )
    return (ClusterError,)


def _grade_batch(batch: Batch, intake: IntakeReport, args: argparse.Namespace, out_dir: Path, err: TextIO) -> int:
    assignment = batch.assignment
    with batch:
        todo = batch.plan(intake.submissions, regrade=args.regrade)
        jobs = args.jobs or max(1, min(os.cpu_count() or 1, len(todo) or 1))
        skipped = len(intake.submissions) - len(todo)
        changed = batch.late_changed
        print(
            f"{assignment.name}: {len(intake.submissions)} submission(s), {skipped} already graded"
            + (" (use --regrade to grade them again)" if skipped else "")
            + (
                f", {len(changed)} of them with a new late deduction "
                f"({terminal_safe(', '.join(r.student for r in changed[:5]))}{', ...' if len(changed) > 5 else ''})"
                if changed
                else ""
            )
            + (f", {len(todo)} to grade " if todo else "")
            + (
                (f"on the Dask cluster at {args.scheduler}" if args.scheduler else f"with {jobs} job(s)")
                if todo
                else ""
            ),
            file=err,
        )
        if todo and args.scheduler:
            print(
                "compilation cache: each worker machine's own, warmed there by grading the starter with the reference in it once"
                if batch.cache
                else "compilation cache: off (--no-cache)",
                file=err,
            )
        elif todo:
            from grader.grading.grade import cache_status

            print(cache_status(assignment, batch.isolation, batch.cache, jobs=jobs, n=len(todo)), file=err)
        # a Ctrl-C that a gc callback dropped (see _stops) stops the grading at its next wait on a
        # sandbox or on the trusted pool (on a Dask cluster, at the next result; the workers' tasks then stop theirs)
        with _Progress(len(todo), err) as progress, _stops(signal.SIGINT) as stopped:

            def advance(rec: Record) -> None:
                progress.advance(rec)
                stopped()

            batch.run(todo, jobs=jobs, on_record=advance)
        records = batch.finish(intake.submissions)
        lost, bugs, runs = list(batch.lost), list(batch.bugs), dict(batch.lost_runs)
    from grader.grading.grade import OVER_LIMIT

    over = [r for r in lost if r.message.startswith(OVER_LIMIT)]
    lost = [r for r in lost if not r.message.startswith(OVER_LIMIT)]
    _summary(records, progress.elapsed, f"{len(todo)} submission(s) ({progress.counts()})", out_dir, err)
    if intake.no_notebook:
        print(
            f"note: no notebook graded for {len(intake.no_notebook)} student(s) who sent other files, and they "
            f"have no row: {terminal_safe(intake.no_notebook_text())}",
            file=err,
        )
    if bugs:
        print(
            f"jaxgrade: error: {len(bugs)} submission(s) not graded: grading them raised, a bug in jaxgrade "
            f"({terminal_safe(', '.join(r.student for r in bugs))}); nothing of theirs was kept, the rest of the "
            "class was graded",
            file=err,
        )
        print(
            "TIP: The traceback is in the log above. Report it with `jaxgrade --version`; once it is fixed, run "
            "the same command again: it grades only these.",
            file=err,
        )
    if over:
        print(
            f"jaxgrade: error: {len(over)} submission(s) not graded: the grader's own process ran past its memory "
            f"or time limit while grading them ({terminal_safe(', '.join(r.student for r in over))}); nothing of "
            "theirs was kept",
            file=err,
        )
        print(
            "TIP: Read these notebooks before grading them again (their records say which limit): a notebook that "
            "makes the grader itself this large or this slow is a bug in jaxgrade or an attack on it. Report it "
            "(SECURITY.md).",
            file=err,
        )
    if lost:
        print(
            f"jaxgrade: error: {len(lost)} submission(s) not graded: the grader's own process was lost "
            f"while grading them ({terminal_safe(', '.join(r.student for r in lost))}); nothing of theirs was kept",
            file=err,
        )
        again = sorted(r.student for r in lost if runs.get(r.student, 1) > 1)
        if again:
            print(
                f"TIP: {terminal_safe(', '.join(again))} were lost on earlier runs too: grade each alone (--jobs 1 and that "
                "notebook), and lower its sandbox's memory limit (limits: memory_total_bytes in grading.yaml) so "
                "that it fails by itself instead of taking the grader's process down.",
                file=err,
            )
        else:
            print(
                "TIP: Run the same command again: it grades only these. If it happens again, "
                + (
                    "the workers are short of memory: give them more, or fewer threads (dask worker --nthreads)."
                    if args.scheduler
                    else "the machine is short of memory: lower --jobs."
                ),
                file=err,
            )
    return EXIT_FAIL if lost or bugs or over else EXIT_OK


class _Progress:
    """A progress bar with counts and ETA on a terminal; plain lines otherwise."""

    def __init__(self, total: int, err: TextIO) -> None:
        self.total, self.err = total, err
        self.done = self.errors = self.timeouts = self.lost = self.bugs = 0
        self.t0 = time.monotonic()
        self.elapsed = 0.0
        self.console = Console(file=err, highlight=False)
        self.bar: Any = None

    def __enter__(self) -> _Progress:
        if self.total and self.console.is_terminal:
            self.bar = Progress(
                TextColumn("grading"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[counts]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self.bar.start()
            self.task = self.bar.add_task("grading", total=self.total, counts=self.counts())
        return self

    def counts(self) -> str:
        graded = self.done - self.errors - self.timeouts - self.lost - self.bugs
        text = f"graded {graded}, errors {self.errors}, timeouts {self.timeouts}"
        return text + (f", lost {self.lost}" if self.lost else "") + (f", grader bugs {self.bugs}" if self.bugs else "")

    def advance(self, rec: Record) -> None:
        self.done += 1
        self.errors += rec.status == "error"
        self.timeouts += rec.status == "timeout"
        self.lost += rec.status == "lost"
        self.bugs += rec.status == "grader_error"
        line = f"{rec.student}: {rec.score:g}/{rec.max_score:g} {rec.status} ({rec.timings.get('total', 0):.1f}s)"
        if rec.status != "graded":
            line += f" — {rec.message[:120]}"
        line = terminal_safe(line)  # ids come from file names, messages from the students' code
        if rec.review:
            line += f" [to read: {len(rec.review)} finding(s), first in cell {rec.review[0].get('cell')}]"
        if self.bar is not None:
            self.bar.update(self.task, advance=1, counts=self.counts())
            self.bar.console.print(line, markup=False)
            return
        spent = time.monotonic() - self.t0
        eta = spent / self.done * (self.total - self.done)
        print(f"[{self.done}/{self.total}] {line}; {self.counts()}; ETA {_duration(eta)}", file=self.err, flush=True)

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.t0
        if self.bar is not None:
            self.bar.stop()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _summary(records: list[Record], elapsed: float, graded_now: str, out_dir: Path, err: TextIO) -> None:
    console = Console(file=err, highlight=False)
    table = Table(title=f"{len(records)} student(s) in {out_dir / 'gradebook.db'}")
    for col in ("status", "students", "mean score", "min", "max"):
        table.add_column(col, justify="left" if col == "status" else "right")
    for status in ("graded", "error", "timeout"):
        group = [r for r in records if r.status == status]
        if group:
            scores = [r.score for r in group]
            table.add_row(
                status, str(len(group)), f"{sum(scores) / len(scores):.2f}", f"{min(scores):g}", f"{max(scores):g}"
            )
    late = [r for r in records if r.late]
    if late:
        table.caption = f"{len(late)} late submission(s); scores shown after the late deduction"
    console.print(table)
    _review_summary(records, out_dir, err)
    print(
        f"done: {graded_now} in {_duration(elapsed)}; results in {out_dir / 'results'}, "
        f"feedback in {out_dir / 'feedback'}, report {out_dir / 'report.html'}, grades {out_dir / 'grades.csv'}",
        file=err,
    )


def _review_summary(records: list[Record], out_dir: Path, err: TextIO, shown: int = 10) -> None:
    """The notebooks whose code a TA should read before trusting their score
    (grader/intake/review.py), each with its first finding."""
    flagged = sorted((r for r in records if r.review), key=lambda r: r.student)
    if not flagged:
        return
    print(
        f"to read: {len(flagged)} notebook(s) with code that can change what the grader observes in the "
        f"student's kernel (their scores stand; the class report lists every finding: {out_dir / 'report.html'}):",
        file=err,
    )
    for r in flagged[:shown]:
        f = r.review[0]
        more = f" (+{len(r.review) - 1} more)" if len(r.review) > 1 else ""
        print(
            terminal_safe(
                f"  {r.student}: cell {f.get('cell')}, line {f.get('line')}: {f.get('why')} "
                f"({str(f.get('what', ''))[:60]}){more}"
            ),
            file=err,
        )
    if len(flagged) > shown:
        print(f"  and {len(flagged) - shown} more", file=err)


# --------------------------------------------------------------------------- export / gradescope


EXPORT_FILES = {"canvas": "canvas-{name}.csv", "moodle": "moodle-{name}.csv", "csv": "grades-{name}.csv"}


def _graded(args: argparse.Namespace) -> tuple[exports.ExportMeta, list[Record]]:
    """The assignment (``--assignment``, or the only one) and its current records in ``--from DIR``'s gradebook."""
    src = Path(args.source)
    db = src / "gradebook.db"
    if not db.is_file():
        raise CliError(f"{db}: no gradebook here", "Pass the --out directory of `jaxgrade grade` to --from.")
    try:
        gb = Gradebook(db)
    except GradebookError as exc:
        raise CliError(str(exc), "Pass the --out directory of `jaxgrade grade` to --from.") from None
    with gb:
        names = gb.assignments()
        name = args.assignment
        if name is None:
            if len(names) != 1:
                raise CliError(
                    f"{db} holds {len(names)} assignments ({', '.join(names) or 'none'})",
                    "Name one with --assignment NAME." if names else "Grade something first.",
                )
            name = names[0]
        elif name not in names:
            raise CliError(f"{db}: no results for assignment {name!r}", f"It holds: {', '.join(names) or 'nothing'}.")
        info = gb.assignment(name)
        records = gb.records(name)
    assert info is not None
    title, canvas_id, moodle_id = info.title, info.canvas_id, info.moodle_id
    try:  # LMS ids added to grading.yaml after grading count without a regrade
        entry = load_course(_course(args)).assignments.get(name)
    except ConfigError:
        entry = None
    if entry is not None:
        title = entry.title or title
        canvas_id, moodle_id = entry.canvas_id or canvas_id, entry.moodle_id or moodle_id
    meta = exports.ExportMeta(
        name=name, title=title, points_possible=info.points_possible, canvas_id=canvas_id, moodle_id=moodle_id
    )
    return meta, records


def cmd_export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.publish.output import OutputPathError, check_file_target, check_folder_target

    src = Path(args.source)
    meta, records = _graded(args)
    name = meta.name
    folder = args.format == "gradescope"  # a folder of results.json files; the others are one CSV file
    default = src / (f"gradescope-{name}" if folder else EXPORT_FILES[args.format].format(name=name))
    if folder and args.out == "-":  # there is no one file to print
        raise CliError(
            "--out -: a gradescope export is a folder (a results.json for each student), not one file for stdout",
            f"Pass the folder to write it into, e.g. --out gradescope-{name}, or drop --out to write {default}.",
        )
    target = Path(args.out) if args.out and args.out != "-" else default
    try:
        if folder:
            check_folder_target(target)  # before anything is written
            paths = exports.write_gradescope(records, target)
            print(f"wrote {len(paths)} results.json file(s) under {target}", file=err)
            return EXIT_OK
        text = {"canvas": exports.canvas_csv, "moodle": exports.moodle_csv, "csv": exports.plain_csv}[args.format](
            records, meta
        )
        if args.out == "-":
            out.write(text)
            return EXIT_OK
        check_file_target(target)  # a folder: the whole file would be written beside it, then not renamed
        write_atomic(target, text)
    except exports.ExportError as exc:
        tip = (
            f"Set {exc.setting} under assignments.{name} in grading.yaml and export again from the course directory."
            if exc.setting
            else ""
        )
        raise CliError(str(exc), tip) from None
    except OutputPathError as exc:
        if folder:
            tip = "--out names the folder to write the results.json files into: choose another."
        else:
            where = f"e.g. --out {target / default.name}" if target.is_dir() else "choose another"
            tip = f"--out names the file to write: {where}, or - for stdout."
        raise CliError(str(exc), tip) from None
    except OSError as exc:  # writing --out (not permitted, disk full...); the names in exc are of temporary files
        raise CliError(f"{target}: cannot write there: {exc.strerror or exc}", "Choose another --out.") from None
    print(f"wrote {args.format} grades of {len(records)} student(s) for {name} to {target}", file=err)
    return EXIT_OK


def _canvas_settings(args: argparse.Namespace) -> CanvasConfig:
    settings = load_course(_course(args)).canvas
    if settings is None:
        raise CliError(
            "grading.yaml has no canvas: settings, so jaxgrade does not know where to post",
            'Add to grading.yaml:  canvas: {base_url: "https://canvas.example.edu", course_id: "1234"}  '
            "(the number in the course's Canvas address).",
        )
    return settings


def _canvas_token(settings: CanvasConfig, *, required: bool) -> str:
    token = os.environ.get(settings.token_env, "").strip()
    if not token and required:
        raise CliError(
            f"no Canvas token: the environment variable {settings.token_env} is not set",
            f"Create a token in Canvas (Account > Settings > New access token) and set it for this shell only: "
            f"`read -rs {settings.token_env} && export {settings.token_env}`. Never write it into the course.",
        )
    return token


def cmd_post_canvas(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    settings = _canvas_settings(args)
    meta, records = _graded(args)
    if not meta.canvas_id:
        raise CliError(
            f"assignment {meta.name!r} has no Canvas id",
            f'Add canvas_id: "<id>" under assignments.{meta.name} in grading.yaml (the number in the Canvas '
            "assignment's address, .../assignments/<id>).",
        )
    if not canvas.is_canvas_id(meta.canvas_id):  # it goes into the URL's path
        raise CliError(
            f"assignment {meta.name!r}: canvas_id {meta.canvas_id!r} is not a Canvas assignment id",
            f"Set canvas_id under assignments.{meta.name} in grading.yaml to the number in the Canvas assignment's "
            'address (.../assignments/<id>), e.g. canvas_id: "555".',
        )
    todo = canvas.plan(records, meta, comment=args.comment)
    token = _canvas_token(settings, required=not args.dry_run)
    client = canvas.CanvasClient(settings.base_url, token, token_env=settings.token_env) if token else None
    course_id = settings.course_id or ""
    where = f"Canvas course {course_id}, assignment {todo.assignment_id} ({meta.name})"
    try:
        if client is not None:
            todo = canvas.with_current(todo, client.current_grades(course_id, todo.assignment_id))
        print(f"{where}: {len(records)} student(s) in the gradebook", file=out)
        for line in todo.lines():
            print(terminal_safe(line), file=out)  # students' names and ids
        if args.dry_run:
            if args.comment and todo.to_post:  # what each student would read (the first one in full)
                first = todo.to_post[0]
                print(
                    terminal_safe(f"the comment each grade would carry, e.g. {first.name or first.student}'s:"),
                    file=out,
                )
                print(terminal_safe("  " + first.comment.replace("\n", "\n  ")), file=out)
            known = "" if client else f" (current grades not read: {settings.token_env} is not set)"
            print(f"dry run: {len(todo.to_post)} grade(s) would be posted{known}; nothing was sent", file=out)
            return EXIT_OK
        if not todo.to_post or client is None:
            print("nothing to post: Canvas already has these grades", file=out)
            return EXIT_OK
        job = canvas.post(client, course_id, todo)
    except canvas.CanvasError as exc:  # Canvas refused or failed: not a usage error
        print(f"jaxgrade: error: {exc.message}", file=err)
        print(f"TIP: {exc.tip}", file=err)
        return EXIT_FAIL
    print(f"posted {len(todo.to_post)} grade(s) to {where}: Canvas job {job.get('id')} completed", file=out)
    return EXIT_OK


def _warn_unfinished(assignment: Assignment, err: TextIO) -> None:
    """What `jaxgrade validate` would list as left to write (an assignment `jaxgrade new` made and
    nobody finished): shipped as it is, students would get its TODOs and stubs."""
    left = scaffold.todos(assignment)
    if left:
        print(
            f"warning: {assignment.name} is not finished ({len(left)} thing(s) left to write; first: {left[0]}); "
            f"`jaxgrade validate {assignment.name}` lists them",
            file=err,
        )


def cmd_gradescope(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.gradescope.bundle import build_bundle
    from grader.publish.output import OutputPathError

    course = load_course(_course(args))
    _warn_unfinished(course.assignment(args.name), err)  # the same checks as grading: reference and hidden tests exist
    try:
        target = build_bundle(course, args.name, Path(args.out))
    except OutputPathError as exc:
        where = f"e.g. --out {Path(args.out) / 'autograder.zip'}" if Path(args.out).is_dir() else "choose another"
        raise CliError(str(exc), f"--out names the zip to write: {where}.") from None
    print(f"wrote the Gradescope autograder for {args.name} to {target}", file=err)
    return EXIT_OK


def cmd_release(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.course.release import ReleaseError, build_release

    course = load_course(_course(args))
    with contextlib.suppress(ConfigError):  # build_release says what is missing, in its own words
        _warn_unfinished(course.assignment(args.name), err)
    try:
        folder = build_release(course, args.name, Path(args.out), make_zip=args.zip)
    except ReleaseError as exc:
        raise CliError(exc.message, exc.tip) from None
    print(f"wrote the student bundle of {args.name} to {folder} (public tests only)", file=err)
    if args.zip:
        print(f"wrote {folder.parent / (args.name + '.zip')}: upload it to your LMS for students", file=err)
    print(f"its first cell installs the checker with `%pip install -q {course.release.install}`", file=err)
    if "release" not in course.model_fields_set:
        print("  (the default: set release.install in grading.yaml to a git URL or a wheel's URL)", file=err)
    return EXIT_OK


# --------------------------------------------------------------------------- new / validate / list


def cmd_new(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    course = load_course(_course(args))
    try:
        functions = scaffold.parse_functions(args.functions, args.name)
        paths = scaffold.create(course, args.name, functions=functions, title=args.title)
    except scaffold.ScaffoldError as exc:
        raise CliError(exc.message, exc.tip) from None
    print(f"new assignment {args.name} ({', '.join(functions)}):", file=out)
    for path in paths:
        print(f"  {path.relative_to(course.root).as_posix():44} {scaffold.describe(path)}", file=out)
    print(
        f"next: write what the {scaffold.TODO_MARK} lines ask for, the reference and the mutant, then run "
        f"`jaxgrade validate {args.name}`: it lists what is left, then grades the reference, the mutant and the starter.",
        file=out,
    )
    return EXIT_OK


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.course.validate import validate

    assignment = _assignment(args, args.name)
    _warn_isolation(args.isolation, err)
    report = validate(assignment, jobs=args.jobs or max(1, min(os.cpu_count() or 1, 4)), isolation=args.isolation)
    for line in report.lines():
        print(line, file=out)
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.grading.grade import collect_points

    course = load_course(_course(args))
    for name in course.assignments:
        a = course.assignment(name, staff=False)
        points = collect_points(a, hidden=a.hidden_tests.is_dir())
        per = ", ".join(f"{c} {p:g}" for c, p in points.items())
        try:
            check_requirements(a)
            needs = ""
        except UnmetRequirementError as exc:
            needs = f"; cannot be graded here: needs {exc.needs}"
        print(f"{name:24} {a.title} — {sum(points.values()):g} points ({per}){needs}", file=out)
    return EXIT_OK


def _warn_isolation(requested: str, err: TextIO) -> None:
    try:
        warning = isolation_warning(choose_isolation(requested))
    except RuntimeError as exc:
        raise CliError(str(exc), "Install bubblewrap (apt-get install bubblewrap) or use --isolation auto.") from None
    if warning:
        print(warning, file=err)
    limits = resource_warning()
    if limits:
        print(limits, file=err)


def _jobs(text: str) -> int:
    """``--jobs``: a count of submissions at once, 1 or more (0, the default, is the CPU count)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected 1 or more (or 0 for the CPU count), got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jaxgrade", description="Grade JAX notebook assignments safely.")
    p.add_argument("--version", action="version", version=f"jaxgrade {__version__}")
    p.add_argument("--course", help="the course directory (with grading.yaml); default: found from the cwd")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the grader does")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--isolation",
            choices=("auto", "bwrap", "process"),
            default="auto",
            help="sandbox: bubblewrap when available (auto), required (bwrap), or a plain subprocess (process)",
        )

    c = sub.add_parser("check", help="run the public tests on your notebook (students)")
    c.add_argument("notebook")
    c.add_argument("--assignment", help="assignment name; default: from the notebook's metadata")
    c.add_argument(
        "--json", action="store_true", help="print the result record as JSON (with --watch: one line per check)"
    )
    c.add_argument(
        "--watch",
        action="store_true",
        help="check again each time the notebook is saved, with the next sandbox started ahead (Ctrl-C to stop)",
    )
    c.add_argument(
        "--no-server",
        action="store_true",
        help="check in this command only: do not use, or leave behind, the background checker that "
        "keeps the next check's sandbox ready",
    )
    common(c)
    c.set_defaults(func=cmd_check)

    g = sub.add_parser("grade", help="grade submissions with public and hidden tests (TAs)")
    g.add_argument("--assignment", required=True)
    g.add_argument(
        "--out", required=True, help="output directory (gradebook.db, results/, feedback/, report.html, grades.csv)"
    )
    g.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        help="submissions graded at once (default: the CPU count); with --scheduler, the workers' threads decide",
    )
    g.add_argument("--regrade", action="store_true", help="grade again submissions the gradebook already holds")
    g.add_argument(
        "--any-metadata",
        action="store_true",
        help="grade the notebooks as --assignment even where most say they are another assignment (their metadata)",
    )
    g.add_argument(
        "--no-cache",
        dest="cache",
        action="store_false",
        help="do not use (or warm) the trusted compilation cache: slower, for comparisons",
    )
    g.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="grade on the workers of this Dask scheduler, e.g. tcp://10.0.0.5:8786 (pip install 'jaxgrade[dask]'); "
        "the workers need bubblewrap unless --isolation process is given",
    )
    g.add_argument(
        "submissions",
        nargs="+",
        metavar="SUBMISSION",
        help="notebooks, folders, or LMS downloads (Canvas or Moodle zip, Gradescope export)",
    )
    common(g)
    g.set_defaults(func=cmd_grade)

    e = sub.add_parser("export", help="grades for the LMS, from a graded directory's gradebook")
    e.add_argument("--from", dest="source", required=True, metavar="DIR", help="the --out directory of `grade`")
    e.add_argument("--format", required=True, choices=("canvas", "moodle", "gradescope", "csv"))
    e.add_argument("--assignment", help="which assignment, when the gradebook holds several")
    e.add_argument("--out", help="output file ('-' for stdout; a directory for gradescope); default: in DIR")
    e.set_defaults(func=cmd_export)

    po = sub.add_parser("post", help="post grades to an LMS through its API")
    lms = po.add_subparsers(dest="lms", required=True, metavar="LMS")
    pc = lms.add_parser("canvas", help="post the gradebook's current scores to Canvas (canvas: in grading.yaml)")
    pc.add_argument("--from", dest="source", required=True, metavar="DIR", help="the --out directory of `grade`")
    pc.add_argument("--assignment", help="which assignment, when the gradebook holds several")
    pc.add_argument(
        "--comment",
        action="store_true",
        help="with each grade posted, a comment: the student's feedback summary (only grades that differ from Canvas's are posted)",
    )
    pc.add_argument("--dry-run", action="store_true", help="show what would change in Canvas and send nothing")
    pc.set_defaults(func=cmd_post_canvas)

    gs = sub.add_parser("gradescope", help="build a Gradescope autograder zip for an assignment")
    gs.add_argument("name")
    gs.add_argument("--out", required=True, help="the zip to write, e.g. autograder.zip")
    gs.set_defaults(func=cmd_gradescope)

    r = sub.add_parser("release", help="build the student bundle of an assignment (public tests only)")
    r.add_argument("name")
    r.add_argument("--out", required=True, help="the folder to write NAME/ into")
    r.add_argument("--zip", action="store_true", help="also write NAME.zip, ready to upload to the LMS")
    r.set_defaults(func=cmd_release)

    n = sub.add_parser("new", help="start a new assignment: starter, tests, reference stub, a mutant (authors)")
    n.add_argument("name", help="the assignment's name, a Python identifier (names its directories)")
    n.add_argument("--functions", metavar="F,G", help="the functions students write (default: one named NAME)")
    n.add_argument("--title", help="the title students see (default: from NAME)")
    n.set_defaults(func=cmd_new)

    v = sub.add_parser("validate", help="check an assignment: reference full marks, mutants caught, starter ~0")
    v.add_argument("name")
    v.add_argument("--jobs", type=_jobs, default=0)
    common(v)
    v.set_defaults(func=cmd_validate)

    li = sub.add_parser("list", help="list the course's assignments with points per category")
    li.set_defaults(func=cmd_list)
    # `jaxgrade grade --course DIR ...` as well as `jaxgrade --course DIR grade ...`, and in the
    # commands of a command (`jaxgrade post canvas ... --course DIR`)
    commands = list(sub.choices.values())
    while commands:
        sp = commands.pop()
        nested = [a for a in sp._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:
            commands += [c for a in nested for c in a.choices.values()]
        else:
            sp.add_argument("--course", default=argparse.SUPPRESS, help="the course directory (with grading.yaml)")
    return p


def _check_environment() -> None:
    """What the grader reads from its environment, checked before any work starts."""
    try:
        xla_flags.chosen()
    except ValueError as exc:
        raise CliError(str(exc), "Unset it to compile with every flag that makes compiling faster.") from None


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=err)
    try:
        _check_environment()
        return int(args.func(args, out, err))
    except (CliError, ConfigError) as exc:
        return _fail(exc, err)
    except SandboxSetupError as exc:
        return _fail(
            CliError(str(exc), 'See the README\'s section "The sandbox" for what a sandbox needs on this machine.'), err
        )
    except BrokenPipeError:  # `jaxgrade list | head -1`: the reader has what it wanted
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 141
    except KeyboardInterrupt:
        kept = "; results written so far are kept" if getattr(args, "command", "") == "grade" else ""
        print(f"jaxgrade: interrupted{kept}", file=err)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["build_parser", "json", "main"]
