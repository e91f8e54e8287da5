"""Open an untrusted submission (a zip or a folder) into a private folder, or refuse it.

Refused, before anything is parsed: absolute paths and ``..`` (zip slip), symlinks, device
files, archives or files over their size caps, too many files, damaged or foreign archives (a bad
CRC, names that differ between headers or are not UTF-8, a file and a folder of one name, an
unsupported or encrypted member), and files whose SHA-256 does not match ``submission.json``. Every JSON file,
with a schema or not (lesson 05's calibration cache has none), is read by the one strict loader,
``lab.schemas.loads``: NaN, Infinity, a number that overflows to infinity (``-1e999``), a key twice in one
object and deep nesting are refused, naming the file and the field. A file with a schema must match it;
ONNX files are checked in ``grader.models``.
"""
from __future__ import annotations

import errno
import hashlib
import lzma
import os
import shutil
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.results import safe_text
from lab import schemas
from lab.contract import MAX_FILE_BYTES  # any one file: the cap lab submit applies too
from lab.errors import LabError

MAX_ARCHIVE_BYTES = 64 << 20      # the zip as handed in
MAX_UNPACKED_BYTES = 128 << 20    # everything inside, unpacked
MAX_FILES = 200
MAX_DEPTH = 4
ALLOWED_SUFFIXES = frozenset({".py", ".json", ".onnx", ".md", ".txt"})
# What an operating system or an editor adds when a student re-zips by hand: never unpacked, never graded.
JUNK_FOLDERS = frozenset({"__MACOSX", ".ipynb_checkpoints", "__pycache__"})
JUNK_FILES = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})


def is_junk(name: str) -> bool:
    """Is ``name`` an operating system's or editor's leftover (``__MACOSX/``, ``.DS_Store``, ``*.pyc``, ...)?"""
    parts = PurePosixPath(name).parts
    if not parts:
        return False
    last = parts[-1]
    return (any(p in JUNK_FOLDERS for p in parts) or last in JUNK_FILES or last.startswith("._")
            or last.endswith(".pyc"))


class SubmissionInvalid(LabError):
    """The submission cannot be graded as handed in; the message says which file and why."""


@dataclass
class Submission:
    """An unpacked, checked submission: its folder, manifest, and the hash that identifies it."""

    root: Path
    student: str
    manifest: dict
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    sha256: str = ""
    notes: list[str] = field(default_factory=list)  # what was left out while unpacking, for the feedback

    def path(self, rel: str) -> Path:
        return self.root / rel

    def has(self, rel: str) -> bool:
        return rel in self.files

    @property
    def variant(self) -> str | None:
        """The student id whose variant of the lab's data the workspace holds (``lab.variant``), as
        ``submission.json`` claims it; None: the reference variant (the field is absent)."""
        return self.manifest.get("variant")

    @property
    def variant_draw(self) -> int | None:
        """The draw of that variant (``lab.variant``), as ``submission.json`` claims it."""
        return self.manifest.get("variant_draw")

    @property
    def kernel_family(self) -> str | None:
        """The INT8 kernel family the hand-in was made with (``lab.kernels``), or None if not recorded."""
        return self.manifest.get("kernel_family")


def _safe_name(name: str, where: str) -> str:
    if "\\" in name or "\x00" in name:
        raise SubmissionInvalid(f"{where}: entry {name!r} has a backslash or NUL in its name; refused")
    p = PurePosixPath(name)
    if p.is_absolute() or name.startswith("/"):
        raise SubmissionInvalid(f"{where}: entry {name!r} is an absolute path; refused "
                                "(entries must be relative to the workspace)")
    if any(part == ".." for part in p.parts):
        raise SubmissionInvalid(f"{where}: entry {name!r} climbs out of the archive with '..' "
                                "(zip slip); refused")
    if len(p.parts) > MAX_DEPTH:
        raise SubmissionInvalid(f"{where}: entry {name!r} is nested deeper than {MAX_DEPTH} folders")
    if p.suffix not in ALLOWED_SUFFIXES:
        raise SubmissionInvalid(f"{where}: entry {name!r} has an unexpected type; a submission holds only "
                                f"{', '.join(sorted(ALLOWED_SUFFIXES))} files")
    return str(p)


def _wrapper(names: list[str]) -> str:
    """The one folder every file sits in when a student zipped the workspace folder itself, else ''."""
    if "submission.json" in names or not names:
        return ""
    tops = {PurePosixPath(n).parts[0] for n in names}
    if len(tops) == 1 and all(len(PurePosixPath(n).parts) > 1 for n in names):
        top = tops.pop()
        if f"{top}/submission.json" in names:
            return top + "/"
    return ""


def _unzip(archive: Path, dest: Path) -> list[str]:
    """Unpack ``archive`` into ``dest``; return notes on what was left out (junk, a wrapping folder)."""
    where = archive.name
    size = archive.stat().st_size
    if size > MAX_ARCHIVE_BYTES:
        raise SubmissionInvalid(f"{where}: the archive is {size / 2**20:.1f} MiB; the limit is "
                                f"{MAX_ARCHIVE_BYTES >> 20} MiB")
    try:
        zf = zipfile.ZipFile(archive)
    except UnicodeDecodeError as e:
        raise SubmissionInvalid(f"{where}: an entry's name is marked UTF-8 but is not ({e.reason} at byte "
                                f"{e.start}); name files with plain letters and digits") from None
    except (*UNZIP_ERRORS, OSError) as e:
        raise SubmissionInvalid(f"{where}: not a readable zip archive ({_why(e)})") from None
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > MAX_FILES:
            raise SubmissionInvalid(f"{where}: {len(infos)} files; the limit is {MAX_FILES}")
        declared = 0
        for info in zf.infolist():
            mode = info.external_attr >> 16
            name = info.filename
            if stat.S_ISLNK(mode):
                raise SubmissionInvalid(f"{where}: entry {name!r} is a symbolic link; refused")
            kind = stat.S_IFMT(mode)
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise SubmissionInvalid(f"{where}: entry {name!r} is a device or special file; refused")
            if info.is_dir():
                _safe_dir(name, where)
                continue
            if is_junk(name):
                _safe_dir(name, where)
                continue
            _safe_name(name, where)
            if info.file_size > MAX_FILE_BYTES:
                raise SubmissionInvalid(f"{where}: {name} unpacks to {info.file_size / 2**20:.1f} MiB; "
                                        f"the limit per file is {MAX_FILE_BYTES >> 20} MiB")
            declared += info.file_size
        if declared > MAX_UNPACKED_BYTES:
            raise SubmissionInvalid(f"{where}: unpacks to {declared / 2**20:.1f} MiB; the limit is "
                                    f"{MAX_UNPACKED_BYTES >> 20} MiB (archive too large)")
        junk = [i.filename for i in infos if is_junk(i.filename)]
        infos = [i for i in infos if not is_junk(i.filename)]
        prefix = _wrapper([i.filename for i in infos])
        notes = []
        if junk:
            notes.append(f"left out {len(junk)} file(s) an operating system or editor added, not the lessons: "
                         + ", ".join(junk[:3]) + (", ..." if len(junk) > 3 else ""))
        if prefix:
            notes.append(f"every file was inside the folder {prefix!r}; graded as if it were not. Hand in the zip "
                         "that `python -m lab submit` writes, as it is")
        written = 0
        for info in infos:
            rel = _safe_name(info.filename[len(prefix):], where)
            target = dest / rel
            if target.is_dir():
                raise SubmissionInvalid(f"{where}: {rel} is both a folder and a file in the archive; refused")
            if target.exists():
                raise SubmissionInvalid(f"{where}: entry {info.filename!r} appears twice")
            clash = next((p for p in target.relative_to(dest).parents if (dest / p).is_file()), None)
            if clash is not None:
                raise SubmissionInvalid(f"{where}: {rel} needs a folder {clash.as_posix()}, but the archive also "
                                        f"holds a file named {clash.as_posix()}; refused")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "wb") as out:
                    # never trust the declared size: count what really comes out
                    while chunk := src.read(1 << 20):
                        written += len(chunk)
                        if written > MAX_UNPACKED_BYTES or out.tell() + len(chunk) > MAX_FILE_BYTES:
                            raise SubmissionInvalid(f"{where}: {info.filename} unpacks past the size limit "
                                                    "(archive too large)")
                        out.write(chunk)
            except (*UNZIP_ERRORS, OSError) as e:
                if isinstance(e, OSError) and e.errno not in ARCHIVE_ERRNOS:
                    raise  # the grader's own disk (full, read-only): not the student's fault
                raise SubmissionInvalid(f"{where}: entry {info.filename!r} cannot be unpacked ({_why(e)}); "
                                        "the archive is damaged or was not written by `python -m lab submit`. "
                                        "Hand in the zip it writes, as it is") from None
    return notes


# What a damaged or foreign archive raises while it is opened or unpacked: a bad CRC or mismatched names
# (BadZipFile), an unsupported or "encrypted" member (NotImplementedError, RuntimeError), a corrupt stream
# (zlib.error, EOFError, lzma/bz2 errors), a name that is not UTF-8 (UnicodeDecodeError, a ValueError).
UNZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, lzma.LZMAError, EOFError, ValueError,
                NotImplementedError, RuntimeError, struct.error)
# OSErrors an archive's names or streams cause (a bz2 stream's error has no errno); any other is the grader's disk
ARCHIVE_ERRNOS = frozenset({None, errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ENAMETOOLONG, errno.EILSEQ})


def _why(e: BaseException) -> str:
    """An unpacking error as a short reason (the text may quote the archive's own bytes)."""
    if isinstance(e, NotImplementedError):
        return f"compression method not supported: {e}"
    if isinstance(e, RuntimeError) and "encrypted" in str(e):
        return "the entry is encrypted; hand in an archive without a password"
    return f"{type(e).__name__}: {e}"


def _safe_dir(name: str, where: str) -> None:
    p = PurePosixPath(name)
    if p.is_absolute() or any(part == ".." for part in p.parts):
        raise SubmissionInvalid(f"{where}: folder {name!r} is outside the archive (zip slip); refused")


def _copy_folder(src: Path, dest: Path) -> None:
    where = src.name
    count = total = 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        for d in list(dirnames):
            full = Path(dirpath) / d
            if full.is_symlink():
                raise SubmissionInvalid(f"{where}: {full.relative_to(src)} is a symbolic link; refused")
            if d in JUNK_FOLDERS:
                dirnames.remove(d)
        for f in filenames:
            full = Path(dirpath) / f
            rel = full.relative_to(src).as_posix()
            st = full.lstat()
            if stat.S_ISLNK(st.st_mode):
                raise SubmissionInvalid(f"{where}: {rel} is a symbolic link; refused")
            if not stat.S_ISREG(st.st_mode):
                raise SubmissionInvalid(f"{where}: {rel} is a device or special file; refused")
            if is_junk(f):
                continue
            _safe_name(rel, where)
            count += 1
            total += st.st_size
            if count > MAX_FILES:
                raise SubmissionInvalid(f"{where}: more than {MAX_FILES} files")
            if st.st_size > MAX_FILE_BYTES or total > MAX_UNPACKED_BYTES:
                raise SubmissionInvalid(f"{where}: {rel} is past the size limit "
                                        f"({MAX_FILE_BYTES >> 20} MiB a file, {MAX_UNPACKED_BYTES >> 20} MiB in all)")
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(full, dest / rel, follow_symlinks=False)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def student_from_path(path: str | Path) -> str:
    """The student id a gradebook row uses before the manifest is read: the file or folder name.

    Made printable (``grader.results.safe_text``): a name that is not UTF-8 on disk, or holds control
    characters, gets visible escapes, so its feedback, results and gradebook row can be written.
    """
    p = Path(path)
    name = p.stem if p.suffix == ".zip" else p.name
    return safe_text(name, 200).replace("\n", "\\x0a").replace("\t", "\\x09")


def handed_in_path(folder: Path) -> Path:
    """What to grade in a folder an LMS or Gradescope gives one student (Gradescope's submission folder, a Moodle
    download's folder per student): the folder if it holds the hand-in, else its one zip or its one sub-folder."""
    if (folder / "submission.json").is_file():
        return folder
    entries = [p for p in folder.iterdir() if not p.name.startswith(".") and p.name != "__MACOSX"] \
        if folder.is_dir() else []
    zips = [p for p in entries if p.suffix == ".zip" and p.is_file()]
    if len(zips) == 1 and len(entries) == 1:
        return zips[0]
    dirs = [p for p in entries if p.is_dir() and (p / "submission.json").is_file()]
    if len(dirs) == 1:
        return dirs[0]
    return folder


def open_submission(path: str | Path, dest: str | Path) -> Submission:
    """Unpack or copy ``path`` into the empty folder ``dest`` and check it; raise ``SubmissionInvalid``."""
    path, dest = Path(path), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise SubmissionInvalid(f"{path.name}: is a symbolic link; refused")
    notes: list[str] = []
    if path.is_dir():
        _copy_folder(path, dest)
    elif path.suffix == ".zip" and path.is_file():
        notes = _unzip(path, dest)
    else:
        raise SubmissionInvalid(f"{path.name}: expected a .zip made by `python -m lab submit`, or a folder")
    files = {p.relative_to(dest).as_posix(): _sha256(p) for p in sorted(dest.rglob("*")) if p.is_file()}
    if "submission.json" not in files:
        raise SubmissionInvalid(f"{path.name}: no submission.json; hand in with "
                                "`python -m lab submit --student ID`, which writes it")
    manifest_path = dest / "submission.json"
    try:
        manifest = schemas.read("submission", manifest_path)
    except schemas.SchemaError as e:
        raise SubmissionInvalid(str(e)) from None
    listed = manifest["files"]
    for rel, digest in sorted(listed.items()):
        _safe_name(rel, "submission.json")
        if rel not in files:
            raise SubmissionInvalid(f"submission.json lists {rel}, but the archive does not hold it")
        if files[rel] != digest:
            raise SubmissionInvalid(f"{rel}: SHA-256 {files[rel][:12]}... does not match submission.json "
                                    f"({digest[:12]}...); the file changed after hand-in. Run "
                                    "`python -m lab submit` again")
    extra = sorted(set(files) - set(listed) - {"submission.json"})
    if extra:
        raise SubmissionInvalid(f"{extra[0]} is in the archive but not listed in submission.json "
                                f"({len(extra)} unlisted file(s)); run `python -m lab submit` again")
    for rel in files:
        if rel.endswith(".json") and rel != "submission.json":
            _check_json(dest / rel, rel)
    whole = hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(files.items())).encode()).hexdigest()
    return Submission(dest, str(manifest["student"]), manifest, files, whole, notes)


def _check_json(path: Path, rel: str) -> None:
    """Strict JSON (``lab.schemas.loads``, the loader every reader of a hand-in uses); if it names a schema the
    repo has, it must match it."""
    if path.stat().st_size == 0:
        raise SubmissionInvalid(f"{rel}: the file is empty; expected a JSON document written by the lesson")
    try:
        obj = schemas.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise SubmissionInvalid(f"{rel}: not valid JSON ({e})") from None
    name = Path(rel).name[: -len(".json")]
    declared = obj.get("schema") if isinstance(obj, dict) else None
    if name in schemas.names():
        try:
            schemas.validate(name, obj, rel)
        except schemas.SchemaError as e:
            raise SubmissionInvalid(str(e)) from None
    elif isinstance(declared, str) and declared.split("/")[0] in schemas.names():
        try:
            schemas.validate(declared.split("/")[0], obj, rel)
        except schemas.SchemaError as e:
            raise SubmissionInvalid(str(e)) from None


def sha256_of_input(path: str | Path) -> str:
    """A cheap identity of what was handed in (the zip bytes, or every file of a folder), for --resume."""
    p = Path(path)
    if p.is_file():
        return _sha256(p)
    h = hashlib.sha256()
    for f in sorted(p.rglob("*")):
        if f.is_file() and not f.is_symlink():
            h.update(f"{f.relative_to(p).as_posix()}:{_sha256(f)}\n".encode())
    return h.hexdigest()
