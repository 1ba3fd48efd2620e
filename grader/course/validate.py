"""``jaxgrade validate``: the reference and every alternative solution earn full marks, handed in
the way students hand theirs in (the starter with the solution in it, every cell running
without an error), every mutant loses points in its category, the starter earns (nearly)
nothing, and nothing crashes.

An assignment that ``jaxgrade new`` wrote and its author has not finished is not graded: the
report lists what is left to write instead (:func:`grader.course.scaffold.todos`)."""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader.course.config import Assignment, ConfigError
from grader.course.scaffold import todos
from grader.grading.grade import collect_points, filled_solutions, grade_many
from grader.grading.record import CATEGORIES, Record
from grader.intake.notebook import notebook_from_script

MUTANT_HEADER = re.compile(r"^#\s*jaxgrade-mutant:\s*fails=(\w+)\s*$")
STARTER_MAX_FRACTION = 0.1


@dataclass
class Outcome:
    label: str
    expectation: str
    ok: bool
    detail: str


@dataclass
class ValidationReport:
    assignment: str
    outcomes: list[Outcome] = field(default_factory=list)
    todos: list[str] = field(default_factory=list)  # what is left to write; nothing is graded until it is

    @property
    def ok(self) -> bool:
        return not self.todos and bool(self.outcomes) and all(o.ok for o in self.outcomes)

    def lines(self) -> list[str]:
        out = [f"validate {self.assignment}:"]
        if self.todos:
            out += [f"  TODO {line}" for line in self.todos]
            out.append(
                f"NOT written yet: {len(self.todos)} thing(s) left (TODO lines above); once they are written, "
                "validate grades the reference, the mutants and the starter"
            )
            return out
        for o in self.outcomes:
            out.append(f"  {'ok  ' if o.ok else 'FAIL'} {o.label:32} {o.expectation:38} {o.detail}")
        out.append("valid" if self.ok else "NOT valid: see FAIL lines above")
        return out


def mutant_category(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[:1]
    m = MUTANT_HEADER.match(first[0]) if first else None
    if not m or m.group(1) not in CATEGORIES:
        close = difflib.get_close_matches(m.group(1), CATEGORIES, n=1) if m else []
        raise ConfigError(
            f"{path}: the first line must be `# jaxgrade-mutant: fails=<category>` with a category among "
            f"{', '.join(CATEGORIES)}" + (f"; did you mean fails={close[0]}?" if close else "")
        )
    return m.group(1)


def _summary(rec: Record) -> str:
    cats = ", ".join(f"{c} {s:g}/{m:g}" for c, (s, m) in rec.categories().items())
    return f"{rec.score:g}/{rec.max_score:g} ({cats})" + (
        f" [{rec.status}: {rec.message[:80]}]" if rec.status != "graded" else ""
    )


def _cell_failure(cell: dict, sources: list[str]) -> str:
    """A failed cell of a filled-in starter, named by its first line (its number is the filled-in
    notebook's, which validate deletes)."""
    what = ": ".join(filter(None, [str(cell.get("ename", "")), str(cell.get("evalue", ""))[:100]]))
    index = cell.get("index")
    first = (
        next(iter(sources[index].strip().splitlines()), "")
        if isinstance(index, int) and 0 <= index < len(sources)
        else ""
    )
    where = f"the cell `{first[:60]}`" if first else f"cell {index}"
    return f"{where}: {cell.get('status')}" + (f" ({what})" if what else "")


def _crashed(rec: Record) -> str:
    if rec.status != "graded":
        return f"status {rec.status}: {rec.message[:200]}"
    errs = [t.name for t in rec.tests if t.status == "error"]
    return f"tests errored: {', '.join(errs[:5])}" if errs else ""


def validate(assignment: Assignment, *, jobs: int = 2, isolation: str = "auto") -> ValidationReport:
    report = ValidationReport(assignment.name, todos=todos(assignment))
    if report.todos:
        return report  # grading a half-written assignment would only repeat the to-do list as failures
    try:  # a test file that cannot be collected fails every grading below: said at once, not after them
        collect_points(assignment)
    except ConfigError as exc:
        report.outcomes.append(Outcome("tests", "the public and hidden tests collect", False, str(exc)))
        return report
    tmp = Path(tempfile.mkdtemp(prefix="jaxgrade-validate-"))
    try:
        subjects: dict[Path, tuple[str, str | None]] = {}
        # the reference and the alternatives as students hand them in, graded by grade_many (where
        # the compilation cache is cold they are what warms it); an unreadable starter is
        # reported by grading it below
        solved: dict[Path, tuple[str, list[str]]] = {}  # script -> label, cells (to name a failing one)
        for script, nb, why in filled_solutions(assignment):
            label = "reference" if script == assignment.solution else f"alternative {script.stem}"
            if nb is None:
                report.outcomes.append(Outcome(label, "full marks", False, why))
                continue
            solved[script] = (label, [c.source for c in nb.cells])
        starter = tmp / "starter.ipynb"
        shutil.copyfile(assignment.starter, starter)
        subjects[starter] = ("starter", None)
        mutants = sorted(assignment.mutants_dir.glob("*.py")) if assignment.mutants_dir.is_dir() else []
        if not mutants:
            report.outcomes.append(
                Outcome("mutants", "at least one mutant", False, f"none in {assignment.mutants_dir}")
            )
        for m in mutants:
            cat = mutant_category(m)
            nb_path = tmp / f"mutant_{m.stem}.ipynb"
            nbformat.write(notebook_from_script(m.read_text(encoding="utf-8"), assignment.name), nb_path)
            subjects[nb_path] = (f"mutant {m.stem}", cat)
        graded: dict[Path, Record] = {}
        records = grade_many(assignment, list(subjects), jobs=jobs, isolation=isolation, solutions=graded)
        for script, (label, cells_source) in solved.items():
            rec = graded.get(script)
            if rec is None:  # grade_many grades every solution it could read, as validate read them
                report.outcomes.append(Outcome(label, "full marks", False, "not graded"))
                continue
            crash = _crashed(rec)
            cells = [_cell_failure(c, cells_source) for c in rec.cells if c.get("status") != "ok"]
            ok = not crash and not cells and rec.max_score > 0 and rec.score == rec.max_score
            failed = cells + [f"{t.name}: {t.message[:150]}" for t in rec.tests if t.status != "passed"]
            detail = crash or _summary(rec) + (" — " + "; ".join(failed[:3]) if failed else "")
            report.outcomes.append(Outcome(label, "full marks", ok, detail))
        for path, (label, cat) in subjects.items():
            rec = records[path]
            crash = _crashed(rec)
            if label == "starter":
                ok = not crash and rec.score <= STARTER_MAX_FRACTION * rec.max_score
                report.outcomes.append(
                    Outcome(label, f"at most {STARTER_MAX_FRACTION:.0%} of the points", ok, crash or _summary(rec))
                )
            else:
                s, mx = rec.categories().get(cat or "", (0.0, 0.0))
                ok = not crash and mx > 0 and s < mx
                report.outcomes.append(Outcome(label, f"loses points in {cat}", ok, crash or _summary(rec)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report
