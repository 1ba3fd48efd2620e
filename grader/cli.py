"""The ``jaxgrade`` command line: ``check``, ``grade``, ``validate``, ``list``.

The library never prints; this module does.  ``main(argv) -> int`` is the testable entry point,
and :func:`_fail` is the one place that turns an expected error into a message and a TIP.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from grader import __version__
from grader.config import Assignment, ConfigError, find_course_root, load_course
from grader.record import Record
from grader.sandbox import SandboxSetupError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        self.message, self.tip = message, tip


def _fail(exc: CliError | ConfigError, err: TextIO) -> int:
    if isinstance(exc, CliError):
        print(f"jaxgrade: error: {exc.message}", file=err)
        if exc.tip:
            print(f"TIP: {exc.tip}", file=err)
    else:
        print(f"jaxgrade: error: {exc}", file=err)
        print("TIP: fix the named setting and run the command again.", file=err)
    return EXIT_USAGE


def _course(args: argparse.Namespace) -> Path:
    return Path(args.course).resolve() if args.course else find_course_root()


def _assignment(args: argparse.Namespace, name: str, *, staff: bool = True) -> Assignment:
    return load_course(_course(args)).assignment(name, staff=staff)


# --------------------------------------------------------------------------- check


def _render_check(rec: Record, out: TextIO) -> None:
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
        what = f"{c.get('ename')}: {c.get('evalue', '')}" if c.get("ename") else c.get("message", c["status"])
        if c.get("strays"):
            what += f" (left {c['strays']} process(es) running; they were killed)"
        src = f"  `{c['source']}`" if c.get("source") else ""
        print(f"  {where}: {c['status']}: {what.splitlines()[0] if what else ''}{src}", file=out)
    if rec.missing:
        print(f"  missing: {', '.join(rec.missing)} (not defined when the notebook runs top to bottom)", file=out)
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
    if passed == len(rec.tests) and rec.tests:
        print("Hidden tests check more, on other inputs, when your work is graded.", file=out)


def cmd_check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.grading import grade_many
    from grader.notebook import NotebookError, load_notebook

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
    assignment = _assignment(args, name, staff=False)
    _warn_isolation(args.isolation, err)
    rec = grade_many(assignment, [path], jobs=1, public_only=True, isolation=args.isolation)[path]
    if args.json:
        print(rec.to_json(), file=out)
    else:
        _render_check(rec, out)
    ok = rec.status == "graded" and bool(rec.tests) and all(t.status == "passed" for t in rec.tests)
    return EXIT_OK if ok else EXIT_FAIL


# --------------------------------------------------------------------------- grade


def collect_submissions(inputs: list[str]) -> list[tuple[Path, str]]:
    """(path, student id) for every submission named on the command line."""
    found: list[Path] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts and q.is_file())
        elif p.is_file():
            found.append(p)
        else:
            raise CliError(f"{p}: no such file or directory", "Pass notebooks or folders of notebooks.")
    seen: dict[str, Path] = {}
    out: list[tuple[Path, str]] = []
    for p in found:
        student = p.stem
        if student in seen and seen[student].resolve() != p.resolve():
            raise CliError(
                f"two submissions for student {student!r}: {seen[student]} and {p}",
                "Keep one notebook per student (the file name, without .ipynb, is the student id).",
            )
        if student not in seen:
            seen[student] = p
            out.append((p, student))
    return out


def cmd_grade(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.grading import grade_many
    from grader.output import grades_csv, write_atomic, write_record

    assignment = _assignment(args, args.assignment)
    subs = collect_submissions(args.submissions)
    if not subs:
        raise CliError("no submissions found", "Pass notebooks (.ipynb) or folders that contain them.")
    out_dir = Path(args.out)
    (out_dir / "results").mkdir(parents=True, exist_ok=True)
    _warn_isolation(args.isolation, err)
    jobs = args.jobs or max(1, min(os.cpu_count() or 1, len(subs)))
    print(f"grading {len(subs)} submission(s) of {assignment.name} with {jobs} job(s) into {out_dir}", file=err)
    t0 = time.monotonic()
    records: list[Record] = []

    def progress(path: Path, rec: Record) -> None:
        write_record(out_dir, rec)
        records.append(rec)
        print(
            f"[{len(records)}/{len(subs)}] {rec.student}: {rec.score:g}/{rec.max_score:g} {rec.status}"
            f" ({rec.timings.get('total', 0):.1f}s)" + (f" — {rec.message[:120]}" if rec.status != "graded" else ""),
            file=err,
            flush=True,
        )

    grade_many(
        assignment,
        [p for p, _ in subs],
        jobs=jobs,
        students={p: s for p, s in subs},
        isolation=args.isolation,
        on_result=progress,
    )
    write_atomic(out_dir / "grades.csv", grades_csv(records))
    errors = sum(r.status == "error" for r in records)
    timeouts = sum(r.status == "timeout" for r in records)
    print(
        f"done: {len(records)} graded in {time.monotonic() - t0:.1f}s ({errors} errors, {timeouts} timeouts); "
        f"results in {out_dir / 'results'}, grades in {out_dir / 'grades.csv'}",
        file=err,
    )
    return EXIT_OK


# --------------------------------------------------------------------------- validate / list


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.validate import validate

    assignment = _assignment(args, args.name)
    _warn_isolation(args.isolation, err)
    report = validate(assignment, jobs=args.jobs or max(1, min(os.cpu_count() or 1, 4)), isolation=args.isolation)
    for line in report.lines():
        print(line, file=out)
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_list(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from grader.grading import collect_points

    course = load_course(_course(args))
    for name in course.assignments:
        a = course.assignment(name, staff=False)
        points = collect_points(a, hidden=a.hidden_tests.is_dir())
        per = ", ".join(f"{c} {p:g}" for c, p in points.items())
        print(f"{name:24} {a.title} — {sum(points.values()):g} points ({per})", file=out)
    return EXIT_OK


def _warn_isolation(requested: str, err: TextIO) -> None:
    from grader.sandbox import choose_isolation, isolation_warning

    try:
        warning = isolation_warning(choose_isolation(requested))
    except RuntimeError as exc:
        raise CliError(str(exc), "Install bubblewrap (apt-get install bubblewrap) or use --isolation auto.") from None
    if warning:
        print(warning, file=err)


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
    c.add_argument("--json", action="store_true", help="print the result record as JSON")
    common(c)
    c.set_defaults(func=cmd_check)

    g = sub.add_parser("grade", help="grade submissions with public and hidden tests (TAs)")
    g.add_argument("--assignment", required=True)
    g.add_argument("--out", required=True, help="output directory (results/, grades.csv)")
    g.add_argument("--jobs", type=int, default=0, help="submissions graded at once (default: the CPU count)")
    g.add_argument("submissions", nargs="+", metavar="SUBMISSION", help="notebooks or folders")
    common(g)
    g.set_defaults(func=cmd_grade)

    v = sub.add_parser("validate", help="check an assignment: reference full marks, mutants caught, starter ~0")
    v.add_argument("name")
    v.add_argument("--jobs", type=int, default=0)
    common(v)
    v.set_defaults(func=cmd_validate)

    li = sub.add_parser("list", help="list the course's assignments with points per category")
    li.set_defaults(func=cmd_list)
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=err)
    try:
        return int(args.func(args, out, err))
    except (CliError, ConfigError) as exc:
        return _fail(exc, err)
    except SandboxSetupError as exc:
        return _fail(CliError(str(exc), "See the README's section on installing jaxgrade for grading."), err)
    except KeyboardInterrupt:
        print("jaxgrade: interrupted; results written so far are kept", file=err)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["build_parser", "collect_submissions", "json", "main"]
