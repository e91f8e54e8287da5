"""Similar code: hand-ins whose student-written modules are the same once names, comments, strings and layout
are normalised. A list for the instructor to look at, never a change to a score.

``fingerprint(source)`` is the SHA-256 of the module's token stream with every identifier renamed by order of
first use (``v1``, ``v2``, ...; keywords and the names Python itself defines stay), every string literal one
token, comments and docstrings dropped, and layout reduced to Python's own NEWLINE / INDENT / DEDENT tokens (so spacing,
blank lines, line breaks inside brackets and the indent width do not count). Two modules with one fingerprint
do the same thing with other names and words. A module that does not tokenize is fingerprinted on its text with
whitespace removed. ``groups(records)`` groups hand-ins whose every module (``MODULES``) has one fingerprint.
"""
from __future__ import annotations

import builtins
import hashlib
import io
import keyword
import re
import tokenize

MODULES = ("calibration_reader.py", "metrics.py")
KEEP = set(keyword.kwlist) | set(keyword.softkwlist) | set(dir(builtins)) | {"self", "cls"}
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
# Python 3.12 splits an f-string into these tokens; 3.11 gives one STRING
_FSTRING = {getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, n)}


def normalised_tokens(source: str) -> list[str]:
    """The module's tokens with names, strings, comments and layout normalised (raises ``tokenize.TokenError``,
    ``IndentationError`` or ``SyntaxError`` for a module Python cannot tokenize)."""
    names: dict[str, str] = {}
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in SKIP:
            continue
        if tok.type == tokenize.NAME and tok.string not in KEEP:
            out.append(names.setdefault(tok.string, f"v{len(names) + 1}"))
        elif tok.type == tokenize.STRING or tok.type in _FSTRING:
            if not out or out[-1] != "S":  # "a" "b" and an f-string's parts are one string
                out.append("S")
        elif tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            out.append(tokenize.tok_name[tok.type])
        else:
            out.append(tok.string)
    return _without_docstrings(out)


def _without_docstrings(tokens: list[str]) -> list[str]:
    """A string that is a statement of its own (a docstring) is a comment: dropped with its NEWLINE."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        if (tokens[i] == "S" and i + 1 < len(tokens) and tokens[i + 1] == "NEWLINE"
                and (not out or out[-1] in ("NEWLINE", "INDENT", "DEDENT"))):
            i += 2
            continue
        out.append(tokens[i])
        i += 1
    return out


def fingerprint(source: str | bytes) -> str:
    """SHA-256 of the normalised module (see the module's docstring)."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    try:
        stream = "\x00".join(normalised_tokens(text))
    except Exception:  # noqa: BLE001 - TokenError, SyntaxError, or whatever else a broken module raises there
        stream = "raw\x00" + re.sub(r"\s+", "", text)
    return hashlib.sha256(stream.encode("utf-8", "surrogatepass")).hexdigest()


def groups(records: dict[str, dict[str, str | None]]) -> list[list[str]]:
    """Students whose every module has the same fingerprint, in groups of two or more, largest first.
    ``records``: student -> module -> fingerprint (None: the module is not in the hand-in); a hand-in with none
    of the modules is in no group."""
    by_key: dict[tuple, list[str]] = {}
    for student, fps in sorted(records.items()):
        key = tuple(fps.get(m) for m in MODULES)
        if any(key):
            by_key.setdefault(key, []).append(student)
    return sorted((g for g in by_key.values() if len(g) > 1), key=lambda g: (-len(g), g))
