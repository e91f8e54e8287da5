"""The student's workspace: one folder the lessons write into, never the fixtures.

Where it is does not depend on the folder a kernel or a terminal happens to start in (``resolve_work_dir``):
``LAB_WORK_DIR`` wins (a hub admin sets ``~/calibration-lab/workspace``; on Colab a folder on Drive); a relative
``WORK_DIR`` is read against the kit's ``notebooks/`` folder, the one the lessons' ``"../workspace"`` is written for;
outside a kit, on Colab, under ``/content``, which the runtime keeps. Files are written with the mode the umask
gives (an instructor can read a student's workspace where the umask lets them).

The first lesson to open a workspace records the INT8 kernel family its numbers are computed as (``FAMILY_FILE``);
every later lesson computes as that family, emulating it where the CPU differs (a Colab runtime or a hub node can
change CPU between sessions), so one workspace never mixes families and ``lab submit`` can say which it holds.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from lab import kernels, variant
from lab.data import file_sha256, fixture_path
from lab.errors import LabError, WorkspaceError

DEFAULT_WORK_DIR = "workspace"
ENV_WORK_DIR = "LAB_WORK_DIR"  # overrides every WORK_DIR: where a hub or Colab keeps the student's work
KIT_MARKERS = (".calibration-lab-kit", "lab/__init__.py")  # a kit (``make kit`` marks it) or a checkout of the lab
COLAB_ROOT = Path("/content")  # the only folder a Colab runtime's files survive in, unless Drive is mounted
VARIANT_FILE = "variant.json"  # the student id whose variant of the data this workspace holds (lesson 00 writes it)
FAMILY_FILE = "kernel-family.json"  # the kernel family the workspace's numbers are computed as (the first lesson's)


def kit_root(start: Path | None = None) -> Path | None:
    """The kit (or checkout) folder holding ``start`` (default: the current folder): the nearest folder upward with
    ``notebooks/`` and one of ``KIT_MARKERS``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks").is_dir() and any((folder / m).exists() for m in KIT_MARKERS):
            return folder
    return None


def in_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def _from_env(work_dir: Path) -> Path | None:
    value = os.environ.get(ENV_WORK_DIR, "").strip()
    return Path(value).expanduser() if value else None


def _absolute(work_dir: Path) -> Path | None:
    return work_dir if work_dir.is_absolute() else None


def _in_kit(work_dir: Path) -> Path | None:
    kit = kit_root()
    return kit / "notebooks" / work_dir if kit else None


def _colab(work_dir: Path) -> Path | None:
    return COLAB_ROOT / work_dir.name if in_colab() else None


# (why, rule): the first rule that gives a folder decides where the workspace is; the current folder last
WORK_DIR_RULES = (("LAB_WORK_DIR is set", _from_env), ("WORK_DIR is absolute", _absolute),
                  ("inside the kit", _in_kit), ("on Colab", _colab), ("the current folder", lambda w: Path.cwd() / w))


def resolve_work_dir(work_dir: str | Path = DEFAULT_WORK_DIR) -> Path:
    """The absolute workspace folder ``work_dir`` names, by ``WORK_DIR_RULES``."""
    given = Path(work_dir).expanduser()
    for _, rule in WORK_DIR_RULES:
        found = rule(given)
        if found is not None:
            return found.resolve()
    raise AssertionError("the last rule always gives a folder")


def make_workspace(work_dir: str | Path = DEFAULT_WORK_DIR, student: str | None = None) -> Path:
    """Create ``work_dir`` (if needed), prove it is writable, and copy the FP32 model in as ``source.onnx``.

    Conversions always read ``source.onnx``: ONNX Runtime's converter writes temporary
    files next to its input, so it must never run on the fixture in place.

    ``student`` (lesson 00's ``STUDENT_ID``) is recorded in ``VARIANT_FILE`` the first time; every lesson's call
    then makes the lab's data this student's variant (``lab.variant``) for the rest of the notebook. A workspace
    with no id recorded is the instructor's reference variant.
    """
    work = resolve_work_dir(work_dir)
    try:
        work.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=work, prefix=".write-test-"):
            pass
    except PermissionError:
        raise WorkspaceError(f"WORK_DIR {str(work)!r}: permission denied; set WORK_DIR in the parameters cell (or "
                             f"{ENV_WORK_DIR}) to a folder you own") from None
    except OSError as e:
        raise WorkspaceError(f"WORK_DIR {str(work)!r} cannot be written ({e.strerror or e}); "
                             f"set WORK_DIR in the parameters cell (or {ENV_WORK_DIR}) to a folder you own") from None
    if student:
        record_student(work, student)
    variant.activate(*(recorded_variant(work) or (None,)))
    note = pin_family(work)
    if note:
        print(note)
    source_model(work)
    return work


def recorded_family(work: str | Path) -> str | None:
    """The kernel family ``work/FAMILY_FILE`` records, or None (no file yet)."""
    path = Path(work) / FAMILY_FILE
    if not path.exists():
        return None
    try:
        return kernels.check_family(json.loads(path.read_text(encoding="utf-8"))["family"])
    except (OSError, ValueError, KeyError, TypeError, LabError) as e:
        raise WorkspaceError(f"{path}: field 'family' should be 'exact' or 'saturating' ({e}); delete the file and "
                             "run the lessons again from lesson 00") from None


def pin_family(work: str | Path) -> str:
    """Compute as the family ``work`` records (recording the target family the first time); a line for the student
    when that is not this CPU's own, or when ``$LAB_KERNEL_FAMILY`` asks for another (that setting wins)."""
    recorded, asked = recorded_family(work), os.environ.get(kernels.ENV_VAR) or None
    if recorded is None:
        recorded = kernels.target_family()
        atomic_write_text(Path(work) / FAMILY_FILE,
                          json.dumps({"schema": "kernel-family/1", "family": recorded}, indent=2) + "\n")
    if asked and kernels.check_family(asked) != recorded:
        return (f"Kernel family: {FAMILY_FILE} records {recorded}, but {kernels.ENV_VAR}={asked} computes this "
                f"notebook as {asked}: the workspace's lessons then disagree; unset it to compute as {recorded}")
    if asked:
        return ""
    kernels.pin(recorded)
    if recorded == kernels.machine_family():
        return ""
    return (f"Kernel family: this workspace's numbers are computed as the {recorded} family ({FAMILY_FILE}); this "
            f"CPU's kernels are {kernels.machine_family()}, so the lab emulates {recorded} to keep them consistent")


def record_student(work: str | Path, student: str) -> Path:
    """Write ``work/VARIANT_FILE`` naming ``student``, once: a workspace holds one student's variant."""
    path = Path(work) / VARIANT_FILE
    try:
        variant.key(student)
    except ValueError as e:
        raise WorkspaceError(f"STUDENT_ID in lesson 00's parameters cell: {e}") from None
    before = recorded_student(work)
    if path.exists() and before != student:
        raise WorkspaceError(f"{path} records student {before!r}: this workspace holds that student's variant of the "
                             f"data. Use a new WORK_DIR for {student!r} (or delete {path.name} and every file the "
                             "lessons wrote there, then run the lessons again from lesson 00)")
    if not path.exists():
        made = sorted(p.relative_to(work).as_posix() for p in Path(work).rglob("*")
                      if p.suffix in (".onnx", ".json") and p.name not in ("source.onnx", FAMILY_FILE)
                      and not p.name.startswith("."))
        if made:
            raise WorkspaceError(f"{Path(work)} already holds {made[0]} (and {len(made) - 1} more files) that lessons "
                                 f"wrote with the instructor's reference data, before any STUDENT_ID was given: use a "
                                 f"new WORK_DIR for {student!r}, and run the lessons there from lesson 00")
        _, draw = variant.key(student)  # type: ignore[misc]  # a student id (checked above): never the reference
        atomic_write_text(path, json.dumps({"schema": "variant/1", "student": student, "draw": draw}, indent=2) + "\n")
    return path


def recorded_variant(work: str | Path) -> variant.Variant | None:
    """The (student id, draw) ``work/VARIANT_FILE`` records, or None (no file: the reference variant)."""
    path = Path(work) / VARIANT_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        v = variant.key(doc["student"], doc["draw"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WorkspaceError(f"{path}: fields 'student' and 'draw' should be what lesson 00 recorded ({e}); "
                             "delete the file and run lesson 00 again with STUDENT_ID set") from None
    return v


def recorded_student(work: str | Path) -> str | None:
    """The student id ``work/VARIANT_FILE`` records, or None."""
    v = recorded_variant(work)
    return None if v is None else v[0]


def source_model(work: str | Path) -> Path:
    """``work/source.onnx``, a byte copy of the FP32 fixture (copied again if it drifted)."""
    src, dst = fixture_path("fp32.onnx"), Path(work) / "source.onnx"
    if not dst.exists() or file_sha256(dst) != file_sha256(src):
        shutil.copyfile(src, dst)
    return dst


def umask() -> int:
    """The process's umask (read by setting it and back: there is no getter before Python 3.13's os)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a plain ``open`` gives a new file: 0o666 less the umask."""
    return 0o666 & ~umask()


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> Path:
    """Write text to ``path`` through a temporary file and a rename, so readers never see half a file; the file
    gets ``mode``, by default the umask's (``mkstemp`` alone would leave it 0600, unreadable to an instructor
    collecting a student's workspace). The grader passes 0600: grades are the instructor's."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, file_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_module(work_dir: str | Path, name: str):
    """Import ``work_dir/<name>.py`` fresh (edits since the last import are picked up).

    This is how lessons use the student's own module files, so the code the grader
    drives is exactly the code the notebook ran.
    """
    path = Path(work_dir) / f"{name}.py"
    if not path.exists():
        raise WorkspaceError(f"{path} does not exist yet; run the exercise cell that writes {path.name}")
    spec = importlib.util.spec_from_file_location(f"workspace_{name}", path)
    assert spec is not None and spec.loader is not None, path  # a .py path always has a spec and a source loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(spec.name, None)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:  # IndentationError included: name the line, not importlib's frames
        raise WorkspaceError(f"{path.name} line {e.lineno}: {type(e).__name__}: {e.msg}; fix that line in the "
                             f"exercise cell that writes {path.name}, run it again, then this cell") from None
    except Exception as e:  # noqa: BLE001 - any error the student's module raises on import: name its line
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
        where = f" on line {lines[-1]}" if lines else ""
        raise WorkspaceError(f"importing {path.name} raised {type(e).__name__}{where}: {e}; fix the exercise cell "
                             f"that writes {path.name}, run it again, then this cell") from None
    return module


def student_reader(work_dir: str | Path):
    """The ``DigitReader`` class from the student's ``calibration_reader.py`` (lesson 02's exercise writes it; every
    later lesson calibrates with it)."""
    path = Path(work_dir) / "calibration_reader.py"
    if not path.exists():
        raise WorkspaceError(f"{path.name} is not in WORK_DIR ({Path(work_dir)}): run lesson 02 "
                             "(the calibration reader) first; it writes the DigitReader this lesson calibrates with")
    module = load_module(work_dir, "calibration_reader")
    if not hasattr(module, "DigitReader"):
        raise WorkspaceError(f"{path.name} defines no class DigitReader; lesson 02's exercise writes it")
    return module.DigitReader
