"""Grading one submission end to end, and many in parallel.

``grade_notebook`` loads and validates the notebook, executes it in a sandbox, runs the public
and hidden tests through pytest in this (trusted) process, and returns a :class:`Record`.
Student failures become data in the record; only a bug in the grader raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import nbformat
import pytest

from grader import __version__
from grader.batch import forkserver
from grader.batch.pool import Lost, Raised, TrustedPool, die_with, over_memory
from grader.course.config import BrokenTestsError, check_requirements, load_course
from grader.errors import SubmissionError
from grader.grading import checks
from grader.grading.kept_reference import KeptModule
from grader.grading.plugin import GradingPlugin
from grader.grading.record import CATEGORIES, Record, cap_record, total
from grader.grading.submission import Submission
from grader.host import xla_cache, xla_flags
from grader.host.cgroups import protect_trusted
from grader.host.eval_cache import EvalCache, beside
from grader.host.memory import (
    address_space_allowance,
    cap_malloc_arenas,
    is_out_of_memory,
    limit_memory,
    under_memory_limit,
    unlimit_memory,
)
from grader.host.sandbox import (
    Isolation,
    SandboxSetupError,
    choose_isolation,
    sandbox_env,
    sweep_after_lost_grader,
)
from grader.host.session import Session
from grader.host.xla_cache import XlaCache
from grader.host.xla_flags import sandbox_xla_flags
from grader.intake.notebook import (
    NotebookError,
    completed_starter,
    load_notebook,
    notebook_from_script,
    sha256_file,
)
from grader.intake.review import review_notebook

if TYPE_CHECKING:
    from grader.course.config import Assignment

log = logging.getLogger(__name__)

# Trusted code imported once per process, keyed by the assignment version too (which digests the
# reference's bytes): a process that outlives an edit of the solution never grades with the old one.
_REFERENCES: dict[tuple[Path, str], Any] = {}
_REFERENCES_LOCK = threading.Lock()


def load_reference(assignment: Assignment) -> Any:
    """Import the reference solution (trusted code) once per process and assignment version."""
    path = assignment.solution.resolve()
    key = (path, assignment.version())
    with _REFERENCES_LOCK:  # the grading thread and the one that prepares it (_prepare_trusted_side)
        return _REFERENCES.get(key) or _import_reference(assignment, path, key)


def _import_reference(assignment: Assignment, path: Path, key: tuple[Path, str]) -> Any:
    name = f"jaxgrade_reference_{assignment.name}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the reference solution {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _REFERENCES[key] = module
    return module


def new_session(
    assignment: Assignment,
    path: Path,
    notebook_json: str,
    isolation: str,
    *,
    xla_cache: XlaCache | None = None,
    eval_cache: EvalCache | None = None,
) -> Session:
    """The sandbox session for grading ``path`` (not started)."""
    iso = choose_isolation(isolation)
    return Session(
        notebook_json,
        limits=assignment.limits,
        isolation=iso,
        env=_env_for(assignment),
        protect=_hidden_from_sandbox(assignment, path),
        xla_cache=xla_cache,
        eval_cache=eval_cache if iso == "bwrap" else None,  # elsewhere the kernel could reach the evaluator
    )


def _hidden_from_sandbox(assignment: Assignment, path: Path) -> tuple[Path, ...]:
    """The folders a submission's sandbox must not see: the reference, the notebook's own, the
    grading processes' compilations (a sandbox refuses to start where it would mount one)."""
    return (
        assignment.course.root / "reference",
        assignment.reference_dir,
        Path(path).parent,
        xla_cache.trusted_root(),  # the grading processes' own compilations
    )


def prestart(assignment: Assignment, path: Path, isolation: str) -> Session:
    """A session for the next version of ``path``, started now with no notebook: its worker,
    kernel (JAX imported) and evaluator are ready when the notebook is handed over (the
    ``session`` of :func:`grade_notebook`).  Nothing of a submission is in it before then."""
    session = new_session(assignment, path, "", isolation)
    try:
        session.start()
    except BaseException:
        session.close()
        raise
    return session


def ready_ahead(session: Session | None, assignment: Assignment, path: Path, isolation: str) -> Session | None:
    """A session started ahead (:func:`prestart`), if it can grade ``path`` now: started as
    :func:`new_session` would start it now (the limits, the sandbox environment with its device
    count, the folders hidden from it, the isolation) and both its processes alive (an idle one
    is not expected to die, but is not trusted to).  Else it is closed, and None."""
    if session is None:
        return None

    def resolved(paths: tuple[Path, ...]) -> tuple[Path, ...]:
        return tuple(Path(p).resolve() for p in paths)

    same = (
        session.limits == assignment.limits
        and session.env == _env_for(assignment)
        and resolved(session.protect) == resolved(_hidden_from_sandbox(assignment, path))
        and session.isolation == choose_isolation(isolation)
    )
    if same and all(p is not None and p.alive() for p in (session.worker, session.evaluator)):
        return session
    session.close()
    return None


def _prepare_trusted_side(assignment: Assignment) -> None:
    """Import what the tests will need (JAX, the reference solution): a head start only, so
    a failure here is left for the tests' own import to report."""
    try:
        import jax.numpy  # noqa: F401

        if assignment.solution.is_file():
            load_reference(assignment)
    except Exception:
        log.debug("preparing the trusted side failed; the tests will say why", exc_info=True)


#: pytest's plugins a grading run goes without: no cache, terminal or stepwise; and no hunt for
#: unraisable or thread exceptions, whose two full garbage collections at the end of every run
#: cost 0.1 s of each submission once JAX is loaded (and whose warnings no record shows).
_NO_PLUGINS = ("cacheprovider", "terminal", "stepwise", "unraisableexception", "threadexception")


def _pytest_args(assignment: Assignment, paths: list[Path]) -> list[str]:
    """pytest's command line for the course's test folders: no config file, and none of :data:`_NO_PLUGINS`."""
    files = [str(p) for p in paths if p.exists()]
    return [*files, "-c", os.devnull, "--rootdir", str(assignment.course.root), "--import-mode=importlib"] + [
        arg for plugin in _NO_PLUGINS for arg in ("-p", f"no:{plugin}")
    ]


def run_tests(
    assignment: Assignment,
    submission: Any,
    *,
    public_only: bool = False,
    seed: int | None = None,
    plugins: tuple[object, ...] = (),
) -> tuple[list[Any], list[str]]:
    """Run the public (and hidden) tests against a submission proxy; return (results, staff errors).
    ``plugins`` are more pytest plugins for the run (the self-check's choice of tests)."""
    visibility = {assignment.public_tests: "visible"}
    paths = [assignment.public_tests]
    if not public_only:
        visibility[assignment.hidden_tests] = "after_published"
        paths.append(assignment.hidden_tests)
    plugin = GradingPlugin(
        submission=submission,
        reference=KeptModule(load_reference(assignment), assignment.version())
        if assignment.solution.is_file()
        else None,
        seed=assignment.seed if seed is None else seed,
        visibility_of=visibility,
        student_text=submission.take_student_text if isinstance(submission, Submission) else None,
        tolerance=checks.Tolerance(assignment.config.tolerance.rtol, assignment.config.tolerance.atol),
        hidden_salt=0 if public_only else assignment.hidden_salt(),
    )
    args = _pytest_args(assignment, paths)
    with _fresh_test_modules(paths):
        code = pytest.main(args, plugins=[plugin, *plugins])
    errors = list(plugin.errors)
    if plugin.interrupted:  # Ctrl-C during the tests: stop, never a record that says "error"
        raise KeyboardInterrupt
    if plugin.out_of_memory:  # the grader's limit, not a failed test: the submission is not graded
        raise MemoryError("a test ran out of the grading process's memory")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        errors.append(f"pytest could not run the tests (exit code {int(code)}: {pytest.ExitCode(code).name})")
    return plugin.finish(), errors


@contextlib.contextmanager
def _fresh_test_modules(paths: list[Path]) -> Iterator[None]:
    """Forget test modules imported from ``paths`` afterwards: pytest's importlib mode names them by
    their path relative to the rootdir, so another course's tests would otherwise be shadowed."""
    roots = [str(p.resolve()) for p in paths]
    try:
        yield
    finally:
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None) or ""
            if any(f.startswith(r + os.sep) for r in roots):
                del sys.modules[name]


def grade_notebook(
    assignment: Assignment,
    path: Path,
    *,
    public_only: bool = False,
    student: str | None = None,
    isolation: str = "auto",
    xla_cache: XlaCache | None = None,
    eval_cache: EvalCache | None = None,
    session: Session | None = None,
) -> Record:
    """Grade one notebook; never raises for anything the student did.  ``xla_cache`` is the
    trusted compilation cache its sandboxes read (see :func:`warm_cache`); ``eval_cache`` keeps
    the evaluator's answers for every submission (grader/host/eval_cache.py; bubblewrap only).
    ``session`` is a sandbox started ahead with no notebook (:func:`prestart`), for this
    notebook only: it is closed here, whatever happens.  Raises :class:`UnmetRequirementError`
    where the installed packages cannot grade the assignment (its ``requires``)."""
    try:
        check_requirements(assignment)
        return _grade_notebook(
            assignment,
            path,
            public_only=public_only,
            student=student,
            isolation=isolation,
            xla_cache=xla_cache,
            eval_cache=eval_cache,
            session=session,
        )
    finally:
        if session is not None:
            session.close()  # closing twice is harmless


def grade_one(assignment: Assignment, path: Path, *, student: str | None = None, **kwargs: Any) -> Record:
    """:func:`grade_notebook` in this process, with a bug of ours made the submission's
    ``grader_error`` record (never kept) as a pool does; a machine that cannot sandbox anyone
    (:class:`SandboxSetupError`), Ctrl-C and, under :func:`memory_limit` (or a pool's), running
    out of memory go to the caller."""
    try:
        return grade_notebook(assignment, path, student=student, **kwargs)
    except SandboxSetupError:
        raise
    except Exception as exc:
        if under_memory_limit() and is_out_of_memory(exc):  # the caller makes it a loss (grader/batch/pool.py)
            raise
        return _bug_record(assignment, Path(path), student, Raised(traceback.format_exc()))


def _grade_notebook(
    assignment: Assignment,
    path: Path,
    *,
    public_only: bool,
    student: str | None,
    isolation: str,
    xla_cache: XlaCache | None,
    eval_cache: EvalCache | None,
    session: Session | None,
) -> Record:
    path = Path(path)
    _check_trusted_devices(assignment)
    t0 = time.monotonic()
    iso = choose_isolation(isolation)
    rec = Record(
        assignment=assignment.name,
        student=student or path.stem,
        submission_sha256="",
        status="graded",
        grader_version=__version__,
        isolation=iso,
        source=str(path),
    )
    try:
        nb = load_notebook(path)
    except NotebookError as exc:
        # the student's page shows it: their file's name, not where the grader keeps it
        rec.status, rec.message = "error", str(exc).replace(str(path), path.name)
        with contextlib.suppress(Exception):  # what the notebook was out of, as for every record
            rec.max_score = sum(collect_points(assignment, hidden=not public_only).values())
        try:
            rec.submission_sha256 = sha256_file(path)
        except OSError:
            pass
        return rec
    rec.submission_sha256 = nb.sha256
    named = nb.assignment
    if named and named != assignment.name:
        rec.message = f"the notebook's metadata names assignment {named!r}; graded as {assignment.name!r}"
    ahead = session is not None
    if session is None:
        session = new_session(assignment, path, nb.to_json(), iso, xla_cache=xla_cache, eval_cache=eval_cache)
    # the trusted side imports JAX and the reference while the sandbox starts and runs the
    # notebook (it waits on a pipe then): off the critical path of `jaxgrade check`
    prepare = threading.Thread(target=_prepare_trusted_side, args=(assignment,), name="jaxgrade-prepare", daemon=True)
    try:
        if ahead:
            session.load(nb.to_json())
        else:
            session.start()
        prepare.start()
        if not public_only:  # for a TA (tens of ms, beside the sandbox's start); `check` shows none of it
            rec.review = [f.as_dict() for f in review_notebook(nb.node)]
        try:
            report = session.execute()
        finally:
            prepare.join()
        rec.timings["startup"] = round(report.startup, 3)
        rec.timings["execute"] = round(report.duration, 3)
        rec.cells = [c.as_dict() for c in report.problems()]
        if not report.ok and not report.timed_out:
            rec.status = "error"
            rec.message = _join(rec.message, f"the notebook could not be run: {report.message}")
        elif not report.ok:
            rec.status = "timeout"
            rec.message = _join(rec.message, report.message)
        sub = Submission(session, nb)
        rec.missing = _missing(sub, assignment.functions)
        t1 = time.monotonic()
        results, errors = run_tests(assignment, sub, public_only=public_only)
        if session.failure is not None:  # the grader's side failed during the tests: no score
            raise session.failure
        rec.timings["tests"] = round(time.monotonic() - t1, 3)
        rec.tests = results
        if errors:
            rec.status = "error"
            rec.message = _join(rec.message, "grader configuration problem: " + "; ".join(errors))
        if session.lost and rec.status == "graded":
            rec.message = _join(rec.message, session.lost)
            if session.lost_kind == "time":
                rec.status = "timeout"
    finally:
        session.close()
    cpu = session.cpu_seconds()
    if cpu is not None:  # the sandboxes' own CPU time: what a busy neighbour cannot inflate
        rec.timings["cpu"] = round(cpu, 3)
    rec.peak_memory_bytes = session.peak_memory() or 0
    if session.oom_kills():
        rec.message = _join(
            rec.message,
            f"the kernel's OOM killer ended {session.oom_kills()} process(es) of this submission: its sandbox "
            f"may use {assignment.limits.memory_total_bytes / 2**20:.0f} MiB of memory in all",
        )
    rec.score, rec.max_score = total(rec.tests)
    rec.timings["total"] = round(time.monotonic() - t0, 3)
    return cap_record(rec)  # the whole record stays small, however much the notebook printed


def _env_for(assignment: Assignment) -> dict[str, str]:
    """Environment for the sandbox and the evaluator: the assignment's device count."""
    devices = assignment.config.devices
    if devices > 1:
        return {"XLA_FLAGS": sandbox_xla_flags(devices)}
    return {}


def _set_trusted_devices(devices: int, *, fast_compile: bool = False) -> None:
    """Start this (trusted) process's JAX with ``devices`` host devices, so references are
    computed under the same setting as the student's code (float results can differ bitwise
    across device counts), and with ``fast_compile`` the sandboxes' faster compiles too
    (grader/host/xla_flags.py: the same emitters as the student's code, and references compiled
    in a third of the time).  Must run before JAX initialises a backend; a grading process's
    own, never a student's kernel (the in-notebook self-check passes no ``fast_compile``)."""
    wanted = [f"--xla_force_host_platform_device_count={devices}"] if devices > 1 else []
    # without fast_compile, or once JAX has started (its cache key would name flags it does not use)
    fast = xla_flags.fast_compile_flags() if fast_compile and not xla_cache.jax_started() else []
    xla_flags.add_to_process(wanted, defaults=fast)


def _check_trusted_devices(assignment: Assignment) -> None:
    devices = assignment.config.devices
    if devices > 1 and "jax" in sys.modules:
        import jax

        if jax.device_count() != devices:
            raise RuntimeError(
                f"assignment {assignment.name!r} needs {devices} devices but this process's JAX has "
                f"{jax.device_count()}; grade it through grade_many, which starts a process for it"
            )


def _missing(sub: Any, names: Iterable[str]) -> list[str]:
    try:
        return [n for n in names if not sub.probe(n).get("exists")]
    except SubmissionError:
        return []


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


# --------------------------------------------------------------------------- batches


#: The reply of a trusted worker whose sandbox could not be built (:class:`SandboxSetupError`):
#: the machine's problem, not the submission's, so the batch stops with it (:func:`raise_setup_error`)
SETUP_FAILED = "sandbox_setup_error"


def _grade_in_worker(
    root: str, name: str, path: str, student: str | None, isolation: str, public_only: bool, cache: str | None
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    assignment = load_course(Path(root)).assignment(name, staff=not public_only, starter=not public_only)
    try:
        rec = grade_notebook(
            assignment,
            Path(path),
            student=student,
            isolation=isolation,
            public_only=public_only,
            xla_cache=_ready_cache(assignment, cache),  # once the warming task published it
            eval_cache=EvalCache(answers_dir(assignment)) if cache else None,  # from the first notebook on
        )
    except SandboxSetupError as exc:  # no one can be graded here: never one submission's grader bug
        return {SETUP_FAILED: str(exc)}
    return rec.to_dict()


def raise_setup_error(result: Any, where: str = "") -> None:
    """Raise again the :class:`SandboxSetupError` a trusted worker met (``result`` is its reply;
    ``where`` goes before the message): in the coordinator for a pool's, in the Dask task for a
    Dask worker's (grader/batch/cluster.py, whose coordinator then stops the same way).  As
    :func:`grade_one` lets it through, it stops the batch with what to do instead of making
    every submission a grader bug."""
    if isinstance(result, dict) and SETUP_FAILED in result:
        raise SandboxSetupError(f"{where}{result[SETUP_FAILED]}")


_WARM = "warm the trusted compilation cache"
WARM_MIN = 3  # notebooks graded one at a time from which warming first pays (a pool warms beside them)
#: Submissions in a batch from which warming with the alternative solutions too first pays: on 2
#: cores, grading prng_keys's two alternatives cost a class of 8 about 18 s of its first run and
#: saved the next class 0.4 s per notebook; a first run of 53 gained 18 to 21 s (bench/alternatives.py).
ALTERNATIVES_MIN = 50


#: What a trusted worker process may be asked to do, by name (plain data: the pool pickles it, a
#: Dask worker's grading child reads it as a JSON line).
TASKS: dict[str, Callable[..., Any]] = {}


def _task(kind: str, *args: Any) -> Any:
    """A pool task: ``("grade", root, name, path, student, isolation, public_only, cache)`` or
    ``("warm", root, name, isolation, final, alternatives[, records])``."""
    if kind not in TASKS:
        raise ValueError(f"unknown trusted task {kind!r} (expected one of {', '.join(TASKS)})")
    return TASKS[kind](*args)


def _warm_in_worker(
    root: str, name: str, isolation: str, final: str, alternatives: bool = False, records: bool = False
) -> int | dict[str, Any]:
    """The warm task: the entries published, or with ``records`` also the record of each solution
    it graded, by its script's path in the course (``{"entries": n, "records": {path: record}}``)."""
    logging.basicConfig(level=logging.WARNING)
    assignment = load_course(Path(root)).assignment(name, staff=True)
    if not records:
        return warm_cache(assignment, isolation, Path(final), alternatives=alternatives)
    graded: dict[str, dict[str, Any]] = {}
    n = warm_cache(assignment, isolation, Path(final), alternatives=alternatives, graded=graded)
    return {"entries": n, "records": graded}


TASKS.update(grade=_grade_in_worker, warm=_warm_in_worker)


def _sandbox_xla_env(assignment: Assignment) -> dict[str, str]:
    return {**sandbox_env("bwrap", "/sandbox"), **_env_for(assignment)}


def trusted_cache_dir(assignment: Assignment, *, alternatives: bool = False) -> Path:
    """Where the assignment's trusted compilation cache lives (grader/host/xla_cache.py): one per
    assignment version and per set of notebooks it is warmed with (:func:`warm_notebooks`).  With
    ``alternatives``, the one warmed with the alternative solutions too (the same folder when the
    assignment has none)."""
    h = hashlib.sha256()
    for path in [assignment.starter, *(assignment.alternatives() if alternatives else [])]:
        try:
            data = path.read_bytes()
            if path.suffix == ".ipynb":  # only its code runs: a changed text or output is the same cache
                with contextlib.suppress(NotebookError):
                    data = "\0".join(load_notebook(path).code_cells()).encode()
        except OSError:
            continue
        h.update(path.name.encode() + b"\0" + hashlib.sha256(data).digest())
    version = f"{assignment.version()}+{h.hexdigest()[:16]}"
    return xla_cache.cache_dir(assignment.name, version, _sandbox_xla_env(assignment))


def answers_dir(assignment: Assignment) -> Path:
    """Where the evaluator's kept answers for the assignment live (grader/host/eval_cache.py):
    keyed by the assignment version, the sandbox's XLA flags and the evaluator's code, and shared
    by every compilation cache of that version (whichever notebooks warmed it)."""
    return beside(xla_cache.cache_dir(assignment.name, assignment.version(), _sandbox_xla_env(assignment)))


class CachePlan(NamedTuple):
    folder: Path  # the cache the batch reads
    warm: bool  # it is not there yet: the batch warms it first
    alternatives: bool  # warming it grades the alternative solutions too


def cache_plan(assignment: Assignment, n: int) -> CachePlan:
    """The cache a batch of ``n`` submissions reads, and whether (and with what) it must warm it.

    The cache warmed with the alternative solutions too is used whenever it is there.  A batch
    warms it only when it is large enough (:data:`ALTERNATIVES_MIN`) to win back the minutes that
    grading the alternatives takes; a smaller one warms (or reads) the reference's alone."""
    wide = trusted_cache_dir(assignment, alternatives=True)
    with_alternatives = bool(assignment.alternatives())
    if xla_cache.ready(wide) is not None:
        return CachePlan(wide, False, with_alternatives)
    if n >= ALTERNATIVES_MIN:
        return CachePlan(wide, True, with_alternatives)
    final = trusted_cache_dir(assignment)
    return CachePlan(final, xla_cache.ready(final) is None, False)


def _ready_cache(assignment: Assignment, cache: str | None) -> XlaCache | None:
    """The batch's cache once it is published; until then, the reference's alone if an earlier
    batch left it (a batch warming the wider one grades its first submissions with it)."""
    if not cache:
        return None
    return xla_cache.ready(Path(cache)) or xla_cache.ready(trusted_cache_dir(assignment))


def cache_status(assignment: Assignment, isolation: str, cache: bool = True, *, jobs: int = 1, n: int = 1) -> str:
    """One line for the TA: which compilation cache a batch of ``n`` will use, or why none."""
    if not cache:
        return "compilation cache: off (--no-cache)"
    if choose_isolation(isolation) != "bwrap":
        return "compilation cache: off (only bubblewrap sandboxes can mount it read-only)"
    plan = cache_plan(assignment, n)
    if not plan.warm:
        return f"compilation cache: {plan.folder}"
    if jobs <= 1 and assignment.config.devices <= 1 and n < WARM_MIN:
        return f"compilation cache: none yet for this assignment version (a batch of {WARM_MIN} or more warms it)"
    what = "the starter with the reference in it"
    if plan.alternatives:
        what += f", and with each of {len(assignment.alternatives())} alternative solution(s)"
    when = (
        "before the first submission"
        if jobs <= 1 and assignment.config.devices <= 1
        else "beside the first submissions"
    )
    return f"compilation cache: warming {plan.folder} by grading {what} once, {when}"


@lru_cache(maxsize=16)
def _warn_unreadable_starter(starter: Path, why: str) -> None:
    """Once per process and starter (validate asks for the filled-in solutions twice)."""
    log.warning("the solutions are graded without the starter's cells: %s", why)


def filled_solutions(assignment: Assignment, *, alternatives: bool = True) -> list[tuple[Path, Any, str]]:
    """The reference solution and (with ``alternatives``) each alternative solution
    (:meth:`Assignment.alternatives`), as students hand theirs in: the starter filled in with it
    (:func:`completed_starter`), or the bare script when the starter cannot be read.  Staff code
    only.  ``(script, notebook, "")`` each, or ``(script, None, why)`` for a script that cannot
    be read.  What the trusted cache is warmed with, and what `jaxgrade validate` grades."""
    try:
        starter = load_notebook(assignment.starter).node
    except NotebookError as exc:  # validate grades the starter too, and says so there
        _warn_unreadable_starter(assignment.starter, str(exc))
        starter = None
    out: list[tuple[Path, Any, str]] = []
    for script in [assignment.solution, *(assignment.alternatives() if alternatives else [])]:
        try:
            source = script.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            out.append((script, None, f"cannot read {script}: {exc}"))
            continue
        nb = (
            completed_starter(starter, source, assignment.functions, assignment.name)
            if starter is not None
            else notebook_from_script(source, assignment.name)
        )
        out.append((script, nb, ""))
    return out


def warm_notebooks(assignment: Assignment, folder: Path, *, alternatives: bool = True) -> list[tuple[str, Path, Path]]:
    """The trusted notebooks that warm the cache (:func:`filled_solutions`), written into
    ``folder``.  So the cache holds what every student's notebook runs (the tutorial's cells, the
    checks that call the functions) and what the hidden tests' calls compile for the usual ways
    of writing a solution, not only the reference's way.  (label, path, script) each; an
    alternative that cannot be read is left out, a reference that cannot be read is an error."""
    out: list[tuple[str, Path, Path]] = []
    for script, nb, why in filled_solutions(assignment, alternatives=alternatives):
        reference = script == assignment.solution
        label = "the reference" if reference else f"the alternative solution {script.name}"
        if nb is None:
            if reference:
                raise OSError(why)
            log.warning("warming the compilation cache without %s: %s", label, why)
            continue
        path = folder / f"warm-{len(out)}.ipynb"
        nbformat.write(nb, path)
        out.append((label, path, script))
    return out


def warm_cache(
    assignment: Assignment,
    isolation: str,
    final: Path,
    *,
    alternatives: bool = False,
    graded: dict[str, dict[str, Any]] | None = None,
) -> int:
    """Grade the trusted notebooks (:func:`warm_notebooks`) once each with a writable cache, and
    publish what they compiled.

    The only code in those sandboxes is the staff's (the starter, the reference and its
    alternatives) and the tests: trusted, so what they write may be read by every submission.
    Returns the entries published (0 when warming failed: grading then goes on without the cache,
    only slower).  With ``graded``, each solution's record goes there (as a dict, by its
    script's path in the course, :func:`_course_path`), for a caller that judges them (`jaxgrade
    validate`), and none short of full marks is warned about here."""
    staged = xla_cache.staging()
    try:
        answers = EvalCache(answers_dir(assignment))  # the staff's modules: students who write the same get them
        for label, nb_path, script in warm_notebooks(assignment, staged.parent, alternatives=alternatives):
            rec = grade_notebook(
                assignment,
                nb_path,
                student="reference",
                isolation=isolation,
                xla_cache=XlaCache(staged, writable=True),
                eval_cache=answers,
            )
            if graded is not None:
                graded[_course_path(assignment, script)] = rec.to_dict()
                continue
            failed = [f"cell {c.get('index')} {c.get('status')}" for c in rec.cells if c.get("status") != "ok"]
            if rec.status != "graded" or rec.score < rec.max_score or failed:
                log.warning(
                    "warming the compilation cache: %s earned %g/%g (%s%s); run `jaxgrade validate %s`",
                    label,
                    rec.score,
                    rec.max_score,
                    rec.status,
                    "; " + ", ".join(failed[:5]) if failed else "",
                    assignment.name,
                )
        final.parent.mkdir(parents=True, exist_ok=True)
        return xla_cache.publish(staged, final)
    except Exception as exc:  # the cache only saves time: never let it cost a batch
        log.warning("could not warm the compilation cache in %s: %s", final, exc)
        xla_cache.discard(staged)
        return 0
    except BaseException:  # Ctrl-C: nothing half-warmed is left behind either
        xla_cache.discard(staged)
        raise


def grade_many(
    assignment: Assignment,
    paths: list[Path],
    *,
    jobs: int = 1,
    students: dict[Path, str] | None = None,
    isolation: str = "auto",
    public_only: bool = False,
    on_result: Callable[[Path, Record], None] | None = None,
    cache: bool = True,
    solutions: dict[Path, Record] | None = None,
    in_workers: bool = False,
) -> dict[Path, Record]:
    """Grade several notebooks, ``jobs`` at a time, in a pool of trusted worker processes.

    At one job (and one device) the notebooks are graded in this process, one after another,
    under the trusted memory limit but with no deadline: for a caller who watches the one
    notebook (`jaxgrade check`, Gradescope's container).  With ``in_workers`` (what `jaxgrade
    grade` asks) they go to a pool of one worker instead, as at several jobs: a notebook that
    makes the trusted process run without end is killed past its deadline and reported, one
    that takes the process down costs only itself, and the batch goes on.  That costs one
    process start per batch (about 0.7 s on 2 cores).

    With ``cache`` (and bubblewrap), the sandboxes read the assignment's trusted compilation
    cache, which is warmed first if it is not there yet (:func:`cache_plan`: the starter completed
    with the reference, and for a large batch with each alternative solution too), and the
    evaluator's answers are kept for the submissions (and batches) that export the same modules.

    Without bubblewrap the kernels ran as this user and could have written the grading
    processes' own compilations: they are forgotten when the run ends.

    With ``solutions`` (a dict to fill, for `jaxgrade validate`), the staff's solutions are graded
    too, the way students hand them in (:func:`filled_solutions`), and their records put there by
    their scripts' paths (one that cannot be read is left out).  Where the cache is not warm, they
    are what warms it, the alternatives included whatever the batch's size, instead of being
    graded once to warm it and once more to judge them.

    Raises :class:`UnmetRequirementError`, before grading anything, where the installed packages
    cannot grade the assignment (its ``requires``)."""
    check_requirements(assignment)
    iso = choose_isolation(isolation)
    try:
        if solutions is None:
            return _grade_many(assignment, paths, jobs, students, iso, public_only, on_result, cache, None, in_workers)
        filled = {s: nb for s, nb, _ in filled_solutions(assignment) if nb is not None}
        usable = cache and iso == "bwrap" and not public_only
        if usable and cache_plan(assignment, ALTERNATIVES_MIN).warm:
            # the warm grades them (the wider cache: with the alternatives whatever the batch's size)
            out = _grade_many(
                assignment, paths, jobs, students, iso, public_only, on_result, cache, solutions, in_workers
            )
            # a warm that failed, or was lost, graded some of them or none: the rest as submissions,
            # without the cache it did not leave (nor another warm)
            filled = {s: nb for s, nb in filled.items() if s not in solutions}
            if filled:
                with _written(filled) as written:
                    staff = dict.fromkeys(written, "reference")
                    got = _grade_many(assignment, list(written), jobs, staff, iso, False, None, False, None, in_workers)
                solutions.update({written[p]: rec for p, rec in got.items()})
            return out
        # the cache is there (or not used): they are graded beside the submissions, as one of them
        with _written(filled) as written:
            got = _grade_many(
                assignment,
                [*paths, *written],
                jobs,
                {**(students or {}), **dict.fromkeys(written, "reference")},
                iso,
                public_only,
                None if on_result is None else (lambda p, rec: None if p in written else on_result(p, rec)),
                cache,
                None,
                in_workers,
            )
        solutions.update({written[p]: rec for p, rec in got.items() if p in written})
        return {p: rec for p, rec in got.items() if p not in written}
    finally:
        if iso != "bwrap":
            xla_cache.forget_trusted()


def _course_path(assignment: Assignment, script: Path) -> str:
    """A solution script's path in the course folder: the same in a worker process that loaded the
    course again (from a path that may resolve otherwise there)."""
    try:
        return script.relative_to(assignment.course.root).as_posix()
    except ValueError:
        return str(script)


def _solution_records(assignment: Assignment, graded: dict[str, dict[str, Any]]) -> dict[Path, Record]:
    """The warm task's records (:func:`_course_path` -> record) by the solutions' own paths."""
    scripts = {_course_path(assignment, s): s for s in [assignment.solution, *assignment.alternatives()]}
    return {scripts[k]: Record.from_dict(v) for k, v in graded.items() if k in scripts}


@contextlib.contextmanager
def _written(filled: dict[Path, Any]) -> Iterator[dict[Path, Path]]:
    """The filled-in solutions (script -> notebook) written into a folder of their own for the
    time they are graded: notebook path -> script."""
    tmp = Path(tempfile.mkdtemp(prefix="jaxgrade-solutions-"))
    try:
        written: dict[Path, Path] = {}
        for i, (script, nb) in enumerate(filled.items()):
            path = tmp / f"solution_{i}.ipynb"
            nbformat.write(nb, path)
            written[path] = script
        yield written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _grade_many(
    assignment: Assignment,
    paths: list[Path],
    jobs: int,
    students: dict[Path, str] | None,
    iso: Isolation,
    public_only: bool,
    on_result: Callable[[Path, Record], None] | None,
    cache: bool,
    solutions: dict[Path, Record] | None,
    in_workers: bool = False,
) -> dict[Path, Record]:
    """:func:`grade_many`'s work, with the isolation already chosen (``iso``).  With ``solutions``,
    the warm task grades the staff's solutions into it where the cache is to be warmed (the rest
    is :func:`grade_many`'s)."""
    protect_trusted()
    students = students or {}
    out: dict[Path, Record] = {}
    devices = assignment.config.devices
    n = ALTERNATIVES_MIN if solutions is not None else len(paths)  # validate warms the wider cache
    usable = cache and iso == "bwrap" and (paths or solutions is not None) and not public_only
    plan = cache_plan(assignment, n) if usable else None
    cached = str(plan.folder) if plan is not None else None  # what each grading reads (_ready_cache)
    graded: dict[str, dict[str, Any]] | None = {} if solutions is not None and plan is not None and plan.warm else None
    # one at a time: the warm then runs before the first notebook, so it pays only from WARM_MIN
    # notebooks on (a pool of several warms beside them); cache_status says the same
    sequential = jobs <= 1 and devices <= 1
    warm = plan is not None and plan.warm and (not sequential or len(paths) >= WARM_MIN or graded is not None)
    if sequential and not in_workers:
        # grading in this process: the settings of a pool worker's (where its JAX has not started)
        _set_trusted_devices(devices, fast_compile=True)
        if cache and iso == "bwrap":
            xla_cache.use_trusted_cache()
        if warm:
            assert plan is not None
            warm_cache(assignment, iso, plan.folder, alternatives=plan.alternatives, graded=graded)
            if solutions is not None and graded is not None:
                solutions.update(_solution_records(assignment, graded))
        ready = _ready_cache(assignment, cached)
        answers = EvalCache(answers_dir(assignment)) if cached else None
        memory, _ = trusted_limits(assignment)
        for p in paths:
            try:
                with memory_limit(memory):
                    rec = grade_one(
                        assignment,
                        p,
                        student=students.get(p),
                        isolation=iso,
                        public_only=public_only,
                        xla_cache=ready,
                        eval_cache=answers,
                    )
            except Exception as exc:  # grade_one lets only running out of memory through
                if not is_out_of_memory(exc):
                    raise
                rec = _lost_record(assignment, p, students.get(p), Lost(1, None, over_memory(memory)))
            out[p] = rec
            if on_result:
                on_result(p, rec)
        return out
    # trusted worker processes (forked from a server that imported JAX and pytest but never
    # started a backend, or spawned: a fork after JAX starts can deadlock), started with the
    # assignment's device count so that references match the sandbox's setting.  A worker lost
    # mid-grading (the OOM killer, a kill) costs only its submission: it is graded again in a
    # fresh process, and a second loss gives that submission the status "lost".  The cache is
    # warmed by the first task, beside the first submissions; each later one reads it.
    root = str(assignment.course.root)
    tasks: list[tuple[Any, tuple[Any, ...]]] = []
    if warm:
        assert plan is not None
        warm_args = ("warm", root, assignment.name, iso, str(plan.folder), plan.alternatives, graded is not None)
        tasks.append((_WARM, warm_args))
    tasks += [(p, ("grade", root, assignment.name, str(p), students.get(p), iso, public_only, cached)) for p in paths]
    initargs = (devices, None, cache and iso == "bwrap")  # None: the pool makes them die with this process
    memory, seconds = trusted_limits(assignment)
    notebooks = 1 + (len(assignment.alternatives()) if plan is not None and plan.alternatives else 0)

    def deadline(key: Any) -> float:  # the warm grades the starter (and each alternative)
        return seconds * (notebooks if key == _WARM else 1)

    with TrustedPool(
        max(1, jobs),
        initializer=_init_worker,
        initargs=initargs,
        memory_bytes=memory,
        on_death=sweep_after_lost_grader,  # a killed worker's sandboxes leave scratch and cgroups
        preload=forkserver.GRADING,  # forked from a process that imported JAX and pytest once
    ) as pool:
        # an exception here (Ctrl-C, a failed commit, a grader bug) closes the generator, which
        # kills every worker: their sandboxes die with them (bwrap --die-with-parent)
        for p, result in pool.run(_task, tasks, deadline=deadline):
            if p == _WARM:
                if solutions is not None and isinstance(result, dict):
                    solutions.update(_solution_records(assignment, result.get("records", {})))
                continue
            assert isinstance(p, Path)
            raise_setup_error(result)
            if isinstance(result, Lost):
                rec = _lost_record(assignment, p, students.get(p), result)
            elif isinstance(result, Raised):
                rec = _bug_record(assignment, p, students.get(p), result)
            else:
                rec = Record.from_dict(result)
            out[p] = rec
            if on_result:
                on_result(p, rec)
    return out


#: The address space a trusted grading process may use at least (:func:`trusted_limits`), beyond
#: what JAX's threads reserve on this machine (``memory.address_space_allowance``): a worker that
#: has graded holds about 0.8 GiB of address space on 2 cores with its malloc arenas capped
#: (1.6 GiB without), 0.3 GiB resident.
TRUSTED_MEMORY_MIN = 8 * 1024**3
#: Seconds a trusted grading process may spend on one notebook besides its sandbox's time limit
#: at least (:func:`trusted_limits`); an honest notebook's own work there is seconds.
TRUSTED_SLACK_MIN = 300.0


def trusted_limits(assignment: Assignment) -> tuple[int, float]:
    """(address-space bytes, seconds per notebook) for the trusted process that grades one of
    the assignment's notebooks: the sandbox's memory limit, and at least
    :data:`TRUSTED_MEMORY_MIN` (it holds what the sandbox sends back), and what JAX's threads
    reserve on this machine's cores (``memory.address_space_allowance``); the sandbox's time limit
    for a submission and as long again for the grader's own work, at least
    :data:`TRUSTED_SLACK_MIN`.  Those processes are protected from the OOM killer
    (:func:`grader.host.cgroups.protect_trusted`): without a limit of their own, a notebook that
    made one of them grow would have the machine's every other process killed first."""
    limits = assignment.limits
    seconds = limits.wall_timeout + max(TRUSTED_SLACK_MIN, limits.wall_timeout)
    return max(TRUSTED_MEMORY_MIN, limits.memory_bytes) + address_space_allowance(), seconds


@contextlib.contextmanager
def memory_limit(memory_bytes: int) -> Iterator[None]:
    """This process's soft address-space limit lowered to ``memory_bytes`` inside the block (a
    pool's worker keeps it: grader/batch/pool.py), and set back after it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap_malloc_arenas()  # the arenas of threads started before stay: JAX may have started here
    limit_memory(memory_bytes)
    try:
        yield
    finally:
        unlimit_memory(soft, hard)


#: How a lost record's message begins where the trusted process ran past its own limit
#: (:func:`trusted_limits`), not lost to a kill from outside.
OVER_LIMIT = "not graded: the grader's own process ran past its limit"

#: The end of a lost record's message the first time; a later run that loses it again says more
#: (:meth:`grader.batch.run.Batch.note_loss`).
LOST_ONCE = (
    "; this is not the student's doing and it is not a score. "
    "Run the same command again to grade it: a lost result is never kept"
)


def _lost_record(assignment: Assignment, path: Path, student: str | None, lost: Lost) -> Record:
    """The record of a submission whose trusted grading process died every time it was tried."""
    try:
        digest = sha256_file(path)
    except OSError:
        digest = ""
    if lost.limit:  # the grader's own limit, not a death from outside: another try costs as much
        message = (
            f"{OVER_LIMIT} while grading this notebook ({lost.cause}; tried {lost.attempts} time(s)); "
            "this is not a score and it is not kept. "
            "A notebook that makes the grader itself this slow or this large is a grader bug or an attack on "
            "it: read the notebook, and report it (SECURITY.md), before grading it again"
        )
    else:
        message = (
            f"not graded: the grader's own process was lost {lost.attempts} time(s) while grading "
            f"this notebook ({lost.cause}){LOST_ONCE}"
        )
    return Record(
        assignment=assignment.name,
        student=student or path.stem,
        submission_sha256=digest,
        status="lost",
        grader_version=__version__,
        source=str(path),
        message=message,
    )


def _bug_record(assignment: Assignment, path: Path, student: str | None, raised: Raised) -> Record:
    """The record of a submission whose grading raised (a grader bug): never kept, like a lost
    one, so that no 0 reaches the gradebook or the LMS; the traceback goes to the log."""
    who = student or path.stem
    log.error("grading %s raised (a bug in jaxgrade, not the student's doing):\n%s", who, raised.traceback)
    try:
        digest = sha256_file(path)
    except OSError:
        digest = ""
    return Record(
        assignment=assignment.name,
        student=who,
        submission_sha256=digest,
        status="grader_error",
        grader_version=__version__,
        source=str(path),
        message=(
            f"not graded: a bug in the grader stopped grading this notebook ({raised.last_line[:500]}); this is "
            "not the student's doing and it is not a score, so it is not kept. The full traceback is in the log"
        ),
    )


def _init_worker(devices: int, parent: int | None, trusted_cache: bool = False) -> None:
    """A trusted worker: the parent's device count, the sandboxes' compile flags, its own
    compilations kept for the next worker (``trusted_cache``: bubblewrap sandboxes, the cache
    on; :func:`grader.host.xla_cache.use_trusted_cache`), and death with its ``parent`` process
    (even when the parent is SIGKILLed, so that no grading goes on, unseen, after ``jaxgrade
    grade`` is gone; None: a pool's worker, which the pool makes die with it)."""
    _set_trusted_devices(devices, fast_compile=True)
    if trusted_cache:
        xla_cache.use_trusted_cache()
    protect_trusted()  # the OOM killer must pick a sandbox, never a trusted worker (a lost batch)
    if parent is not None:
        die_with(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle


#: collect_points' answers in this process, by the assignment's version (which digests the tests).
_POINTS: dict[tuple[str, str, str, bool], dict[str, float]] = {}


def collect_points(assignment: Assignment, *, hidden: bool = True) -> dict[str, float]:
    """Points per category, from the tests' markers (nothing is run).  Raises
    :class:`BrokenTestsError` when a test file cannot be collected."""
    key = (str(assignment.course.root), assignment.name, assignment.version(), hidden)
    if key not in _POINTS:
        _POINTS[key] = _collect_points(assignment, hidden=hidden)
    return dict(_POINTS[key])


def _collect_points(assignment: Assignment, *, hidden: bool) -> dict[str, float]:
    plugin = GradingPlugin(submission=None, reference=None, seed=0, visibility_of={})
    paths = [assignment.public_tests] + ([assignment.hidden_tests] if hidden else [])
    with _fresh_test_modules(paths):
        pytest.main([*_pytest_args(assignment, paths), "--collect-only"], plugins=[plugin])
    if plugin.errors:
        raise BrokenTestsError(assignment.name, "; ".join(plugin.errors), staff=hidden)
    points: dict[str, float] = {}
    for meta in plugin.collected:
        points[meta.category] = round(points.get(meta.category, 0.0) + meta.points, 6)
    return {c: points[c] for c in CATEGORIES if c in points}
