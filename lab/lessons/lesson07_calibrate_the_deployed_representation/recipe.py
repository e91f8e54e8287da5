"""Calibrate the deployed representation: the calibration selection, the recipe, and verify.

A release is three files in ``WORK_DIR/release/``: ``model.onnx`` (its metadata carries the release id,
the recipe's SHA-256 and the recipe itself), ``recipe.json`` (schema recipe/2) and ``scenarios.json``
(schema scenarios/2). ``verify(model, recipe)`` says exactly what differs when they do not belong together.
The per-scenario verdicts the recipe records come from
``lab.lessons.lesson07_calibrate_the_deployed_representation.scenario_checks``.

Both files record the seed of the scenarios' randomness (the notebook's ``SEED``: the sensor noise of ``noisy``):
``recipe.json`` as ``scenarios.seed`` (and the selection's own as ``calibration.seed``), ``scenarios.json`` as
``seed``; the grader recomputes every scenario with it. A file without one (written before the seed was recorded)
was computed with 0, the lesson's default.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np
import onnx

from lab import data, schemas, variant
from lab.convert import QuantizeSettings, versions
from lab.errors import LabError
from lab.graph import check_io, input_ruler, load, per_channel, quant_format, weight_dtypes
from lab.kernels import check_family, target_family
from lab.lessons.lesson06_accept_or_reject.acceptance import LIMIT
from lab.lessons.lesson07_calibrate_the_deployed_representation import scenarios
from lab.lessons.lesson07_calibrate_the_deployed_representation.scenario_checks import (
    MARGIN_FACTOR,
    ScenarioResult,
    computed_on,
)

# the pool and the tuning images are the scenarios' (scenario_checks reads them too); named here, where selections are
from lab.lessons.lesson07_calibrate_the_deployed_representation.scenarios import POOL_SIZE, TUNING
from lab.workspace import atomic_write_text

RELEASE_ID = "digits-int8-r1"  # the release lesson 07 writes: the model, its recipe and its scenario record
# The reference hand-in's release (grader.reference): per-channel QDQ with 7-bit weights, one of the recipes that hold
# on both kernel families. The lesson releases the fastest of those on the machine that runs it (release.choose).
RELEASE_SETTINGS: QuantizeSettings = {"quant_format": "QDQ", "activation_type": "QInt8", "weight_type": "QInt8",
                                      "per_channel": True, "reduce_range": True}
# What the release's calibration does not represent, recorded in its recipe
NOT_COVERED = ("digits shifted in the frame, low-contrast (fog) and noisy scenes: FP32 itself reads fewer than 95 % of "
               "them, so they are not judged and no calibration can help; dim scenes fall inside the calibrated ranges "
               "but are not sampled; "
               "any camera other than the deployed one (raw 0..16 divided by 16, no clipping)")

RECIPE_SCHEMA, SCENARIOS_SCHEMA = "recipe/2", "scenarios/2"
META_RELEASE, META_SHA, META_RECIPE = ("calibration_lab.release_id", "calibration_lab.recipe_sha256",
                                      "calibration_lab.recipe")
ACTIVATION_DTYPES = {"QInt8": "int8", "QUInt8": "uint8"}
WEIGHT_DTYPES = {"QInt8": "INT8", "QUInt8": "UINT8"}


class ReleaseError(LabError):
    """A release's files do not belong together, or a selection overlaps the acceptance set."""


# --- the calibration selection -----------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """Calibration samples: which images of which split, under which condition, in order, and the seed the
    conditions drew their randomness from (only ``noisy`` draws any)."""

    split: str
    parts: tuple[tuple[str, tuple[int, ...]], ...]  # (condition, positions in the split)
    pixels: np.ndarray = field(repr=False, compare=False)
    dataset_index: tuple[tuple[int, ...], ...] = field(repr=False, compare=False)
    seed: int = 0

    @property
    def sha256(self) -> str:
        return data.data_sha256(self.pixels)

    @property
    def conditions(self) -> list[str]:
        return [c for c, _ in self.parts]

    def __len__(self) -> int:
        return len(self.pixels)

    def to_dict(self) -> dict:
        return {"split": self.split, "count": len(self), "sha256": self.sha256, "seed": int(self.seed),
                "parts": [{"condition": c, "positions": list(p), "dataset_index": list(d)}
                          for (c, p), d in zip(self.parts, self.dataset_index)]}


def tuning_set(split: str = "calibration") -> data.Split:
    """The tuning images: they choose the fix, the acceptance set judges it.

    ``lab.variant.TUNING_COUNT`` (400) training images of the pool that no calibration split holds (the reference's
    or any student's), the same for every variant: a verdict on them forgives as many images as one on the
    acceptance set does, so one image cannot flip the lesson's decisions from one student's variant to another's.
    ``split`` is kept for callers that name it; only ``"calibration"`` has tuning images."""
    if split != "calibration":
        raise ValueError(f"tuning images are held aside for the calibration split only, not {split!r}")
    with np.load(data.fixture_path(f"{data.POOL}.npz")) as f:
        pos = variant.tuning_positions()
        return data.Split("tuning", f["raw"][pos], f["labels"][pos], f["index"][pos])


def select(parts: Sequence[tuple[str, Sequence[int] | slice | None]], split: str = "calibration",
           seed: int = 0) -> Selection:
    """Build a calibration selection from ``(condition, positions)`` pairs over the calibration pool.

    ``positions`` index the pool (``pool_positions()``, the split's first ``POOL_SIZE`` images; None or a slice
    for many); the condition is applied to those images' deployed pixels. Positions ``TUNING`` (300..359) are
    never selected, and the tuning images (``tuning_set``) are in no calibration split. ``seed`` seeds the
    conditions' randomness (``noisy``'s); the selection records it.
    Example: ``select([("daylight", None), ("flash", slice(0, None, 2))])``.
    """
    try:
        s = data.load_split(split)
    except FileNotFoundError:
        raise ReleaseError(f"recipe.select(..., split={split!r}): there is no {split!r} split here, and a calibration "
                           "selection draws from the calibration split only: leave split at its default") from None
    conditions = scenarios.acceptance_conditions()
    chunks, rec, idx = [], [], []
    for condition, positions in parts:
        if condition not in conditions:
            raise ValueError(f"unknown condition {condition!r}; expected one of {sorted(conditions)}")
        pool = min(POOL_SIZE, len(s))
        if isinstance(positions, slice) or positions is None:
            pos = np.arange(pool)[positions if positions is not None else slice(None)]
        else:
            pos = np.asarray(positions, dtype=np.int64).ravel()
        if pos.size == 0 or pos.min() < 0 or pos.max() >= pool:
            raise ValueError(f"positions for {condition!r} must be 0..{pool - 1} (the calibration pool; positions "
                             f"{TUNING.start}..{TUNING.stop - 1} are held aside) and not empty")
        chunks.append(conditions[condition](s.pixels[pos], seed))
        rec.append((condition, tuple(int(p) for p in pos)))
        idx.append(tuple(int(i) for i in s.index[pos]))
    return Selection(split, tuple(rec), np.concatenate(chunks).astype(np.float32), tuple(idx), int(seed))


def condition_row_hashes(acceptance: np.ndarray, conditions: Mapping[str, Callable] | None = None,
                         seed: int = 0) -> dict[str, frozenset[str]]:
    """The acceptance set under each condition, as one content hash per row (what ``shared_rows`` compares with)."""
    conditions = conditions or scenarios.acceptance_conditions()
    return {name: frozenset(data.row_hashes(np.asarray(fn(acceptance, seed), np.float32)))
            for name, fn in conditions.items()}


def shared_with(selection: np.ndarray, hashes: Mapping[str, frozenset[str]]) -> dict[str, int]:
    """Per condition, how many rows of ``selection`` are among ``hashes`` (``condition_row_hashes``)."""
    mine = data.row_hashes(np.asarray(selection, np.float32))
    return {name: len(mine & rows) for name, rows in hashes.items()}


def shared_rows(selection: np.ndarray, acceptance: np.ndarray,
                conditions: Mapping[str, Callable] | None = None, seed: int = 0) -> dict[str, int]:
    """Rows the calibration selection shares with the acceptance set under each condition, by content hash."""
    return shared_with(selection, condition_row_hashes(acceptance, conditions, seed))


def check_disjoint(selection: np.ndarray, acceptance: np.ndarray, **kwargs) -> dict[str, int]:
    """``shared_rows``, raising ``ReleaseError`` if any condition shares a row."""
    shared = shared_rows(selection, acceptance, **kwargs)
    bad = {k: v for k, v in shared.items() if v}
    if bad:
        raise ReleaseError("the calibration selection shares images with the acceptance set: "
                           + ", ".join(f"{v} under {k}" for k, v in bad.items())
                           + "; draw calibration images from the calibration split only")
    return shared


# --- the recipe --------------------------------------------------------------------------------

def preprocessing() -> dict:
    """The deployed preprocessing configuration."""
    return {"input_name": data.INPUT_NAME, "formula": f"pixels = raw / {data.RAW_MAX}", "raw_range": [0, data.RAW_MAX],
            "dtype": "float32", "shape": ["N", data.N_FEATURES], "clip": False}


def kernel_families(by_family: Mapping[str, Sequence[ScenarioResult]]) -> dict:
    """The recipe's record of the target kernel families: where each was computed, its verdicts."""
    return {family: {"computed_on": computed_on(family), **verdicts(results),
                     "results": [r.to_dict() for r in results]}
            for family, results in by_family.items()}


def verdicts(results: Sequence[ScenarioResult]) -> dict:
    """The record of one family's run: its confident margin, whether every judged scenario passes, the unjudged."""
    return {"margin": results[0].margin if results else 0.0,
            "judged_pass": not any(r.needs_work for r in results),
            "not_judged": [r.name for r in results if not r.judged]}


def check_families(by_family: Mapping[str, Sequence[ScenarioResult]], targets: Sequence[str]) -> None:
    """Raise ``ReleaseError`` unless every target family was evaluated and every scenario passes under it."""
    missing = [check_family(f) for f in targets if f not in by_family]
    if missing:
        raise ReleaseError(f"the release was never evaluated under its target kernel family {', '.join(missing)}; "
                           "use scenario_checks.compare_families(..., families=TARGET_FAMILIES)")
    failing = {f: [r for r in by_family[f] if r.needs_work] for f in targets}
    failing = {f: rows for f, rows in failing.items() if rows}
    if failing:
        raise ReleaseError("the release does not pass under every target kernel family: " + "; ".join(
            f"{f}: " + ", ".join(f"{r.name} needs work ({r.note})" if r.note else f"{r.name} needs work" for r in rows)
            for f, rows in failing.items())
            + ". The tuning images did not predict the acceptance set, so this release is not shipped. Do not change "
              "the selection or the recipe until these images pass: that would make the acceptance set a tuning set. "
              "Decide again from the tuning images (more of them, or more conditions), and judge the new release on "
              "images no decision has seen")


def recipe(release_id: str, source_model: str | Path, selection: Selection, settings: Mapping,
           batch_size: int, acceptance: data.Split, results: Sequence[ScenarioResult], model: str | Path,
           not_covered: str, reader: str = "calibration_reader.DigitReader",
           by_family: Mapping[str, Sequence[ScenarioResult]] | None = None, seed: int = 0) -> dict:
    """Assemble ``recipe.json`` (schema recipe/2): everything that decided the released model.

    ``results`` are the scenarios as this machine computes them; ``by_family`` the same scenarios under
    each target kernel family (``scenario_checks.compare_families``), recorded in ``kernel_families``.
    ``seed`` is the one those scenarios were computed with (the notebook's ``SEED``), recorded as
    ``scenarios.seed``: the grader recomputes them with it, and counts the rows shared with the acceptance set
    under each condition with it.
    """
    ruler = input_ruler(model)
    by_family = dict(by_family) if by_family else {target_family(): list(results)}
    doc = {
        "schema": RECIPE_SCHEMA,
        "release_id": release_id,
        "source_model": {"file": Path(source_model).name, "sha256": data.file_sha256(source_model)},
        "preprocessing": preprocessing(),
        "calibration": {**selection.to_dict(), "reader": reader, "batch_size": int(batch_size),
                        "conditions": sorted(set(selection.conditions)), "not_covered": not_covered,
                        "input_ruler": {"scale": ruler.scale, "zero_point": ruler.zero_point, "dtype": ruler.dtype}},
        "quantization": {k: settings[k] for k in ("quant_format", "activation_type", "weight_type", "per_channel",
                                                  "reduce_range", "calibrate_method", "nodes_to_exclude",
                                                  "extra_options")},
        "versions": versions(),
        "acceptance": {"split": acceptance.name, "count": len(acceptance),
                       "sha256": data.data_sha256(acceptance.pixels),
                       "shared_rows_with_calibration": sum(shared_rows(selection.pixels, acceptance.pixels,
                                                                       seed=seed).values())},
        "scenarios": {"limit": LIMIT, "margin_factor": MARGIN_FACTOR, "seed": int(seed),
                      "results": [r.to_dict() for r in results],
                      "accepted": [f"{r.name}: {r.accepted_differences} changed answer(s) where FP32's top-two gap "
                                   f"was under {r.margin:.3f}" for r in results if r.passed and r.accepted_differences]
                      + [f"{r.name}: not judged; {r.note}" for r in results if not r.judged]},
        "kernel_families": kernel_families(by_family),
    }
    return cast(dict, schemas.validate("recipe", doc))


def scenarios_record(release_id: str, model: str | Path, recipe_path: str | Path, acceptance: data.Split,
                     results: Sequence[ScenarioResult], seed: int = 0) -> dict:
    """Assemble ``scenarios.json`` (schema scenarios/2) for the released model, as this machine computes it;
    ``seed`` is the one ``results`` were computed with."""
    doc = {"schema": SCENARIOS_SCHEMA, "release_id": release_id, "seed": int(seed),
           "model_sha256": data.file_sha256(model), "recipe_sha256": data.file_sha256(recipe_path),
           "acceptance": {"split": acceptance.name, "count": len(acceptance),
                          "sha256": data.data_sha256(acceptance.pixels)},
           "limit": LIMIT, "margin_factor": MARGIN_FACTOR,
           "kernel_family": target_family(), **verdicts(results),
           "results": [r.to_dict() for r in results]}
    return cast(dict, schemas.validate("scenarios", doc))


def stamp(model_in: str | Path, model_out: str | Path, release_id: str, recipe_path: str | Path) -> Path:
    """Copy the model with the release id, the recipe's SHA-256 and the recipe text in its metadata."""
    m = onnx.load(str(model_in))
    props = {p.key: p.value for p in m.metadata_props}
    props.update({META_RELEASE: release_id, META_SHA: data.file_sha256(recipe_path),
                  META_RECIPE: Path(recipe_path).read_text(encoding="utf-8")})
    onnx.helper.set_model_props(m, props)
    Path(model_out).parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, str(model_out))
    return Path(model_out)


def write_release(release_dir: str | Path, draft_model: str | Path, recipe_doc: Mapping,
                  acceptance: data.Split, results: Sequence[ScenarioResult]) -> dict[str, Path]:
    """Write ``recipe.json``, then ``model.onnx`` stamped with its hash, then ``scenarios.json`` (with the recipe's
    ``scenarios.seed``: ``results`` were computed with it).

    Refuses (``ReleaseError``) a recipe whose target kernel families do not all pass.
    """
    out = Path(release_dir)
    schemas.validate("recipe", recipe_doc, "recipe.json")
    failing = [f for f, rec in recipe_doc["kernel_families"].items() if not rec["judged_pass"]]
    if failing:
        raise ReleaseError(f"not released: under kernel family {', '.join(failing)} some scenarios need work "
                           f"(recipe kernel_families); fix the model before releasing it")
    recipe_path = atomic_write_text(out / "recipe.json", json.dumps(recipe_doc, indent=2) + "\n")
    model = stamp(draft_model, out / "model.onnx", recipe_doc["release_id"], recipe_path)
    record = scenarios_record(recipe_doc["release_id"], model, recipe_path, acceptance, results,
                              seed=recipe_doc["scenarios"].get("seed", 0))
    scen = atomic_write_text(out / "scenarios.json", json.dumps(record, indent=2) + "\n")
    return {"model": model, "recipe": recipe_path, "scenarios": scen}


# --- verify ------------------------------------------------------------------------------------

@dataclass
class Verification:
    """Whether a model and a recipe belong together, and every difference found."""

    model: str
    recipe: str
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def __str__(self) -> str:
        if self.ok:
            return f"{self.model} and {self.recipe} belong together"
        return (f"{self.model} and {self.recipe} do not belong together:\n  - " + "\n  - ".join(self.differences))

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def raise_for_differences(self) -> None:
        if not self.ok:
            raise ReleaseError(str(self))


def _leaves(obj, prefix: str = "") -> dict[str, object]:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_leaves(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        out = {}
        for i, v in enumerate(obj):
            out.update(_leaves(v, f"{prefix}/{i}"))
        return out
    return {prefix: obj}


def _short(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def verify(model_path: str | Path, recipe_path: str | Path, max_fields: int = 8) -> Verification:
    """Check that ``model_path`` was released with ``recipe_path``; list exactly what differs.

    Reads the recipe (a schema error names the field) and checks the model's inputs and outputs;
    then compares the release id and the recipe hash stamped in the model's metadata, the recipe
    the model carries field by field, and the graph itself (format, per-channel weights, weight
    and activation types, the input ruler) with the recipe's settings.
    """
    model_path, recipe_path = Path(model_path), Path(recipe_path)
    doc = schemas.read("recipe", recipe_path)
    check_io(model_path)
    v = Verification(model_path.name, recipe_path.name)
    diff = v.differences.append
    meta = {p.key: p.value for p in load(model_path).metadata_props}
    if META_RELEASE not in meta or META_SHA not in meta:
        diff(f"the model's metadata has no {META_RELEASE} / {META_SHA}: it was never stamped with a recipe")
    else:
        if meta[META_RELEASE] != doc["release_id"]:
            diff(f"release_id: the model says {meta[META_RELEASE]!r}, {recipe_path.name} says {doc['release_id']!r}")
        actual = data.file_sha256(recipe_path)
        if meta[META_SHA] != actual:
            diff(f"recipe SHA-256: the model was stamped with {meta[META_SHA][:12]}..., {recipe_path.name} "
                 f"hashes to {actual[:12]}... (edited after the release, or another release's recipe)")
    if META_RECIPE in meta:
        try:
            carried = schemas.loads(meta[META_RECIPE])  # strict, as every file of a hand-in: no duplicate keys
        except ValueError as e:
            carried = None
            diff(f"the recipe in the model's metadata ({META_RECIPE}) is not valid JSON ({e})")
        if carried is not None:
            a, b = _leaves(carried), _leaves(doc)
            fields = [k for k in sorted(set(a) | set(b)) if a.get(k, "<missing>") != b.get(k, "<missing>")]
            for k in fields[:max_fields]:
                diff(f"{k}: the model's recipe has {_short(a.get(k, '<missing>'))}, "
                     f"{recipe_path.name} has {_short(b.get(k, '<missing>'))}")
            if len(fields) > max_fields:
                diff(f"... and {len(fields) - max_fields} more field(s) differ")
    q = doc["quantization"]
    fmt = quant_format(model_path)
    if fmt != q["quant_format"]:
        diff(f"quantization/quant_format: the graph is {fmt}, the recipe says {q['quant_format']}")
    pc = per_channel(model_path)
    if pc != bool(q["per_channel"]):
        diff(f"quantization/per_channel: the graph's weights are {'per channel' if pc else 'per tensor'}, "
             f"the recipe says per_channel={q['per_channel']}")
    want_w = WEIGHT_DTYPES.get(q["weight_type"])
    if want_w and want_w not in weight_dtypes(model_path):
        diff(f"quantization/weight_type: the graph stores no {want_w} weights (has {weight_dtypes(model_path)}), "
             f"the recipe says {q['weight_type']}")
    try:
        ruler = input_ruler(model_path)
    except LabError as e:
        diff(f"calibration/input_ruler: {e}")
    else:
        want = doc["calibration"]["input_ruler"]
        if ruler.dtype != ACTIVATION_DTYPES.get(q["activation_type"], ruler.dtype):
            diff(f"quantization/activation_type: the graph quantizes the input to {ruler.dtype}, "
                 f"the recipe says {q['activation_type']}")
        if not math.isclose(ruler.scale, want["scale"], rel_tol=1e-6) or ruler.zero_point != want["zero_point"]:
            diff(f"calibration/input_ruler: the graph's input scale {ruler.scale:.6g} zero point {ruler.zero_point}, "
                 f"the recipe's {want['scale']:.6g} / {want['zero_point']} (calibrated on other data)")
    return v
