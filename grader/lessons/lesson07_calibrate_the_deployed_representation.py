"""Lesson 07: the release record. Hashes against the fixtures, disjoint sets, metadata, scenarios recomputed.

Every scenario is recomputed with the seed the release recorded (``recipe.json`` ``scenarios.seed``, the notebook's
``SEED``; the selection's own is ``calibration.seed``), 0 in a recipe written before the seed was recorded: the
noisy scene's numbers follow it.
"""
from __future__ import annotations

from grader import sandbox
from grader.context import SCALE_REL, SOFTMAX_STEP, WHY_OUTPUT, Context, charged_under, check, number, value
from grader.group import Group
from grader.lessons import lesson02_the_calibration_reader
from grader.mistakes import READER_SIZES
from grader.results import Evidence
from lab import data, evidence, graph, kernels, ruler, variant
from lab.data import EPSILON
from lab.lessons.lesson07_calibrate_the_deployed_representation import recipe, scenario_checks

PART = "release"
MODEL, RECIPE, SCENARIOS = "release/model.onnx", "release/recipe.json", "release/scenarios.json"
NEEDS = (MODEL, RECIPE, SCENARIOS)


def acceptance_row_hashes(split: str, seed: int = 0) -> dict[str, frozenset[str]]:
    """``recipe.condition_row_hashes`` of the acceptance split with the scenarios' ``seed``, once per worker and seed
    (keyed by the fixture file's size and mtime): the lab's split under every condition, the same for every hand-in
    of that seed (about 4 ms each)."""
    st = data.fixture_path(f"{split}.npz").stat()
    return dict(_acceptance_row_hashes(split, st.st_size, st.st_mtime_ns, seed))


@variant.lru_cache(maxsize=4)  # the calibration split is each student's variant's own
def _acceptance_row_hashes(split: str, size: int, mtime_ns: int, seed: int) -> dict[str, frozenset[str]]:
    return recipe.condition_row_hashes(data.load_split(split).pixels, seed=seed)


def scenario_seed(doc: dict) -> int:
    """The seed recipe.json's scenarios were computed with (``scenarios.seed``: the notebook's ``SEED``); 0, the
    lesson's default, in a recipe written before the seed was recorded."""
    return int(doc["scenarios"].get("seed", 0))


def _selection(doc: dict):
    cal = doc["calibration"]
    return recipe.select([(p["condition"], list(p["positions"])) for p in cal["parts"]], split=cal["split"],
                         seed=int(cal.get("seed", 0)))


def _served(ctx: Context, doc: dict, sel, ev: list) -> list[tuple[str, bool]]:
    """The recipe's calibration count against the selection, and against what DigitReader serves of it.

    A reader that drops a partial batch calibrates the release on fewer images than the recipe says.
    That reader is charged once, under lesson 02's contract; here it is named, not charged again.
    """
    count, bs = value(doc, "calibration.count"), value(doc, "calibration.batch_size")
    items = [("the recipe's image count is the selection's", count == len(sel))]
    ev.append(Evidence("calibration.count (images in the selection)", count, len(sel), 0, "an integer count: exact"))
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
        return items
    served = lesson02_the_calibration_reader.served_count(ctx, sel.pixels, bs)
    if served is None:  # the reader could not be run here: nothing is charged for what was not checked
        return items
    ev.append(Evidence(f"images your DigitReader serves of the selection at batch_size={bs}", count, served, 0,
                       "an integer count: exact"))
    if served != count and ctx.charged(READER_SIZES):
        ctx.notes.append(f"lesson 07: recipe.json says {count} calibration images, but your DigitReader serves "
                         f"{served} of them at batch_size={bs}: the release was calibrated on fewer images than "
                         f"its recipe records ({READER_SIZES.charged_under()})")
        return items
    items.append((f"the recipe's count is what your reader served ({served} at batch_size={bs})", served == count))
    return items


def served_runs(ctx: Context) -> list[sandbox.Request]:
    """The reader run ``_served`` asks for (the group's ``request``, planned ahead; both through lesson 02's
    ``served_request``): the recipe's selection at its batch size, if the recipe names one and the reader will run."""
    if not all(ctx.has(rel) for rel in NEEDS):
        return []
    doc = ctx.doc(RECIPE)
    try:
        sel = _selection(doc)
    except Exception:  # noqa: BLE001 - an unbuildable selection: the check says so, and runs no reader
        return []
    bs = value(doc, "calibration.batch_size")
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
        return []
    request = lesson02_the_calibration_reader.served_request(ctx, sel.pixels, bs)
    return [] if request is None else [request]


def _rebuilt(doc: dict, ev: list):
    """The calibration selection rebuilt from the recipe's parts (None when it cannot be), and whether its hash is
    the recipe's; the evidence of either goes to ``ev``."""
    try:
        sel = _selection(doc)
    except Exception as e:  # noqa: BLE001 - an unbuildable selection is the finding
        ev.append(Evidence("calibration selection", "parts", f"cannot rebuild: {e}", None, ""))
        return None, False
    ev.append(Evidence("calibration.sha256 (selection rebuilt from its parts)", doc["calibration"]["sha256"][:16],
                       sel.sha256[:16], 0, "exact"))
    return sel, sel.sha256 == doc["calibration"]["sha256"]


def _selection_items(ctx: Context, doc: dict, sel, model, ev: list) -> list[tuple[str, bool]]:
    """What the lesson's prose asks of a rebuilt selection (every daylight image of the pool, and flash), the
    recipe's image count (the selection's, and what the student's reader served of it), and the released model's
    input ruler (the selection's)."""
    items = []
    if sel is not None:
        try:
            scenario_checks.selection_check(sel)
            items.append(("the selection keeps every daylight image of the pool and adds flash", True))
        except scenario_checks.SelectionCheckFailed as e:
            items.append((f"the selection keeps every daylight image of the pool and adds flash ({e})", False))
        items += _served(ctx, doc, sel, ev)
    r = graph.input_ruler(model)
    if sel is not None:
        scale, zp = ruler.scale_zero_point(float(sel.pixels.min()), float(sel.pixels.max()), r.dtype)
        ruler_ok = abs(r.scale - float(scale)) <= SCALE_REL * float(scale) and r.zero_point == zp
    else:
        ruler_ok = False
    items.append(("the released model's input ruler comes from the selection"
                  + ("" if ruler_ok or sel is None else f" (model scale {r.scale:.6g}, the selection's "
                                                        f"{float(scale):.6g})"), ruler_ok))
    return items


def _recipe(ctx: Context, doc: dict, model):
    """Row ``recipe``: hashes against the fixtures, the selection, and the ruler it implies. Also the selection
    (None when its parts cannot be rebuilt), for the rows after."""
    items, ev = [], []
    fp32_sha = data.file_sha256(data.fixture_path("fp32.onnx"))
    items.append(("source model is the FP32 fixture", doc["source_model"]["sha256"] == fp32_sha))
    ev.append(Evidence("source_model.sha256", doc["source_model"]["sha256"][:16], fp32_sha[:16], 0, "exact"))
    acc_sha = data.data_sha256(data.load_split(doc["acceptance"]["split"]).pixels)
    items.append(("acceptance hash matches its split", doc["acceptance"]["sha256"] == acc_sha))
    ev.append(Evidence("acceptance.sha256", doc["acceptance"]["sha256"][:16], acc_sha[:16], 0, "exact"))
    sel, sel_ok = _rebuilt(doc, ev)
    items.append(("calibration hash matches the selection its parts describe", sel_ok))
    items += _selection_items(ctx, doc, sel, model, ev)
    good = sum(ok for _, ok in items)
    return check(PART, "recipe", good / len(items),
                 "; ".join(f"{name}: {'yes' if ok else 'NO'}" for name, ok in items)
                 + ("" if good == len(items) else ". Write the recipe with lab.lessons."
                    "lesson07_calibrate_the_deployed_representation.recipe.recipe(...) from the selection you "
                    "calibrated with"), ev), sel


def _disjoint(doc: dict, sel):
    """Row ``disjoint``: the selection shares no image with the acceptance set, by content hash, as reported."""
    if sel is None:
        return check(PART, "disjoint", 1, "not checked: the calibration selection cannot be rebuilt from the "
                                          f"recipe's parts ({charged_under(PART, 'recipe')})", assessed=False)
    shared = recipe.shared_with(sel.pixels, acceptance_row_hashes(doc["acceptance"]["split"], scenario_seed(doc)))
    total = sum(shared.values())
    rep = value(doc, "acceptance.shared_rows_with_calibration")
    ok = total == 0 and rep == total
    return check(PART, "disjoint", float(ok),
                 f"the calibration selection shares {total} image(s) with the acceptance set by content hash"
                 + ("" if ok else f" (reported {rep}); draw calibration images from the calibration split only"),
                 [Evidence("shared rows", rep, total, 0, "content hash per row, under every condition")])


def _scenario_row(name: str, s, rep: dict) -> tuple[bool, str, list]:
    """One scenario of scenarios.json against the lab's recomputation: (right, message, evidence)."""
    slack = max(1, s.changed) / s.count
    fa, ia, err, lo = (number(value(rep, k)) for k in ("fp32_accuracy", "int8_accuracy", "max_abs_error", "loss"))
    good = (fa is not None and abs(fa - s.fp32_accuracy) <= EPSILON and ia is not None
            and abs(ia - s.int8_accuracy) <= slack and err is not None and abs(err - s.max_abs_error) <= SOFTMAX_STEP
            and rep.get("verdict") == s.verdict
            and lo is not None and abs(lo - (fa - ia)) <= EPSILON)  # FP32 - INT8
    ev = [Evidence(f"{name} INT8 accuracy", ia, s.int8_accuracy, slack,
                   "near-boundary policy: the images whose answer changed may flip on another CPU"),
          Evidence(f"{name} max abs error", err, s.max_abs_error, SOFTMAX_STEP, WHY_OUTPUT),
          Evidence(f"{name} loss (FP32 accuracy - INT8 accuracy)", lo, s.loss, slack,
                   "near-boundary policy, as for the INT8 accuracy; and exactly your FP32 minus INT8 accuracy")]
    if lo is not None and fa is not None and ia is not None and abs(lo - (fa - ia)) > EPSILON:
        return good, (f"{name}: reported loss {lo:.4g} is not FP32 accuracy minus INT8 accuracy "
                      f"({fa - ia:.4g}): loss = fp32_accuracy - int8_accuracy, positive when INT8 is worse"), ev
    return good, f"{name}: {s.verdict}" + ("" if good else f" (reported {rep.get('verdict')}, "
                                                          f"INT8 accuracy {ia}, recomputed {s.int8_accuracy:.4f})"), ev


def _scenarios(ctx: Context, doc: dict, record: dict):
    """Row ``scenarios``: every scenario recomputed on the released model (with the recipe's seed), the kernel
    families, and the record's own fields."""
    acc_split, seed = data.load_split(doc["acceptance"]["split"]), scenario_seed(doc)
    mine = {s.name: s for s in scenario_checks.compare_scenarios(data.fixture_path("fp32.onnx"), ctx.sub.path(MODEL),
                                                                 acc_split.pixels, acc_split.labels, seed=seed)}
    rows = {row["name"]: row for row in record["results"]}
    judged = [_scenario_row(name, s, rows.get(name, {})) for name, s in mine.items()]
    ok_count, msgs, ev = sum(g for g, _, _ in judged), [m for _, m, _ in judged], [e for _, _, es in judged for e in es]
    fam_ok, fam_msgs, fam_ev = _families(doc, ctx.sub.path(MODEL), acc_split, seed)
    record_wrong = _record_problems(ctx, record, doc, mine)
    if record_wrong:
        msgs.append("scenarios.json does not match the release: " + "; ".join(record_wrong))
    return check(PART, "scenarios", (ok_count + fam_ok + (not record_wrong)) / (len(mine) + 2),
                 "; ".join(msgs + fam_msgs), ev + fam_ev)


def run(ctx: Context) -> list:
    """Lesson 07's four rubric rows, each from its own function."""
    doc, record = ctx.doc(RECIPE), ctx.doc(SCENARIOS)
    recipe_check, sel = _recipe(ctx, doc, ctx.model(MODEL))
    v = recipe.verify(ctx.sub.path(MODEL), ctx.sub.path(RECIPE))  # row metadata: the model carries its recipe
    return [recipe_check, _disjoint(doc, sel), check(PART, "metadata", float(v.ok), str(v).replace("\n", " ")),
            _scenarios(ctx, doc, record)]


def _record_problems(ctx: Context, record: dict, doc: dict, mine: dict) -> list[str]:
    """scenarios.json's own fields: the lab's limit and margin factor, the model and recipe it describes (and the
    recipe's seed), the verdicts.

    The limit decides every verdict: a record that raised it to pass a scenario is not the lab's release.
    """
    wrong = []
    if record.get("seed", 0) != scenario_seed(doc):
        wrong.append(f"seed is {record.get('seed', 0)}; recipe.json's scenarios/seed, which every scenario was "
                     f"recomputed with, is {scenario_seed(doc)} (one release, one seed: re-run lesson 07's last cells)")
    for field, want in (("limit", recipe.LIMIT), ("margin_factor", recipe.MARGIN_FACTOR)):
        got = number(record.get(field))
        if got is None or abs(got - want) > 1e-12:
            wrong.append(f"{field} is {record.get(field)}; the lab's "
                         f"(lab.lessons.lesson07_calibrate_the_deployed_representation.recipe.{field.upper()}) "
                         f"is {want}")
    for field, rel in (("model_sha256", MODEL), ("recipe_sha256", RECIPE)):
        if record.get(field) != ctx.sub.files.get(rel):
            wrong.append(f"{field} is not the hash of {rel}")
    if record.get("acceptance") != {k: doc["acceptance"].get(k) for k in ("split", "count", "sha256")}:
        wrong.append("acceptance is not the recipe's acceptance set (split, count, sha256)")
    if "release_id" in record and record["release_id"] != doc.get("release_id"):
        wrong.append(f"release_id is {record['release_id']!r}; recipe.json's is {doc.get('release_id')!r}")
    rows = {row.get("name"): row for row in record.get("results", []) if isinstance(row, dict)}
    for name, s in mine.items():  # the rest of each row, as lesson 07's scenario_checks computes it
        rep, want = rows.get(name, {}), s.to_dict()
        slack = max(1, s.changed)  # near-boundary policy: the images whose answer changed may flip on another CPU
        for key in ("count", "changed", "accepted_differences", "defects", "fixed", "broken", "description"):
            if key not in rep:
                continue
            got = rep[key]
            if key in ("count", "description"):
                ok = got == want[key] and type(got) is type(want[key])
            else:
                ok = isinstance(got, int) and not isinstance(got, bool) and abs(got - want[key]) <= slack
            if not ok:
                wrong.append(f"results/{name}/{key} is {got!r}, lab.lessons."
                             f"lesson07_calibrate_the_deployed_representation.scenario_checks gives {want[key]!r}")
        wrong += _evidence_problems(name, rep)
        if "note" in rep and _note_claims(rep["note"]) != _note_claims(want["note"]):
            wrong.append(f"results/{name}/note is {rep['note']!r}; the recomputed scenario "
                         + (f"notes {want['note']!r}" if want["note"] else "has nothing to note"))
    wrong += _margin_problems("scenarios.json", record, list(mine.values()))
    passed = not any(s.needs_work for s in mine.values())
    if record.get("judged_pass") is not passed:
        wrong.append(f"judged_pass is {record.get('judged_pass')}, but the recomputed verdicts say {passed}")
    unjudged = [s.name for s in mine.values() if not s.judged]
    if record.get("not_judged") != unjudged:
        wrong.append(f"not_judged is {record.get('not_judged')}, but FP32 itself reads below the floor on {unjudged}")
    return wrong


def _evidence_problems(name: str, rep: dict) -> list[str]:
    """A row's p_value and evidence words are the exact test of its own count, fixed and broken (lab.evidence)."""
    if not {"p_value", "evidence"} & set(rep):
        return []
    try:
        want = evidence.from_counts(rep.get("count", 0), rep.get("fixed", 0), rep.get("broken", 0))
    except ValueError as e:
        return [f"results/{name}: {e}"]
    out = []
    if "p_value" in rep and not (isinstance(rep["p_value"], float) and abs(rep["p_value"] - want.p_value) <= 1e-9):
        out.append(f"results/{name}/p_value is {rep['p_value']!r}; the exact test of its fixed and broken gives "
                   f"{want.p_value:.4g}")
    if "evidence" in rep and rep["evidence"] != want.words():
        out.append(f"results/{name}/evidence is {rep['evidence']!r}; its fixed and broken read {want.words()!r}")
    return out


def _margin_problems(where: str, rec: dict, results: list) -> list[str]:
    """The recorded confident margin (the record's and each row's) against the recomputed one: twice daylight's
    largest change, so within two Softmax output steps (each largest change may move one step on another CPU)."""
    want = results[0].margin if results else 0.0
    rows = [("margin", rec.get("margin"))] + [(f"results/{r.get('name')}/margin", r.get("margin"))
                                             for r in rec.get("results", []) if isinstance(r, dict)]
    return [f"{where} {field} is {got!r}; recomputed {want:.4f} (twice INT8's largest change on daylight)"
            for field, got in rows if (n := number(got)) is None or abs(n - want) > 2 * SOFTMAX_STEP]


def _note_claims(note) -> tuple:
    """What a scenario's note asserts: whether it names a problem, and its FP32 remark (exact: the fixture's)."""
    parts = [p for p in str(note).split("; ") if p] if isinstance(note, str) else [repr(note)]
    return (any(not p.startswith("FP32 itself") for p in parts), [p for p in parts if p.startswith("FP32 itself")])


def _families(doc: dict, model, acc_split, seed: int = 0) -> tuple[float, list[str], list]:
    """The recipe's verdicts under each target kernel family, recomputed (emulated where this CPU differs) with the
    recipe's ``seed``.

    Scores 1 when both families were recorded, every recorded verdict is the recomputed one, and all
    pass; a release never evaluated under a family, or failing under one, scores 0.
    """
    recorded = doc.get("kernel_families") or {}
    missing = [f for f in kernels.FAMILIES if f not in recorded]
    if missing:
        return 0.0, [f"the recipe was never evaluated under kernel family {', '.join(missing)} "
                     "(recipe.json kernel_families): a release must pass on every CPU its users have"], []
    mine = scenario_checks.compare_families(data.fixture_path("fp32.onnx"), model, acc_split.pixels,
                                            acc_split.labels, kernels.FAMILIES, seed=seed)
    wrong, ev = [], []
    for family, results in mine.items():
        rows = {row.get("name"): row for row in recorded[family].get("results", []) if isinstance(row, dict)}
        wrong += [f"{family}: {w}" for w in _margin_problems("recipe.json kernel_families", recorded[family], results)]
        for key, want in (("judged_pass", not any(r.needs_work for r in results)),
                          ("not_judged", [r.name for r in results if not r.judged])):
            if recorded[family].get(key) != want:
                wrong.append(f"{family}/{key} reported {recorded[family].get(key)}, recomputed {want}")
        for r in results:
            rep = rows.get(r.name, {}).get("verdict")
            ev.append(Evidence(f"{family}: {r.name} verdict", rep, r.verdict, None,
                               "recomputed as that family computes"))
            if rep != r.verdict:
                wrong.append(f"{family}/{r.name} reported {rep}, recomputed {r.verdict}")
    failing = [f"{f}/{r.name}" for f, results in mine.items() for r in results if r.needs_work]
    ok = not wrong and not failing
    msg = ("every target kernel family recomputed: no judged scenario needs work" if ok else
           "kernel families: " + "; ".join(wrong + [f"{n} needs work" for n in failing]))
    return float(ok), [msg], ev


GROUPS = (Group("07", PART, ("recipe", "disjoint", "metadata", "scenarios"), run, needs=NEEDS,
                reads=(READER_SIZES,), request=served_runs),)
