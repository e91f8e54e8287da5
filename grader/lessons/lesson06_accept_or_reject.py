"""Lesson 06 (acceptance) and its hidden checks: summaries, summarize(), probabilities, decisions, held-out.

Cross-CPU policy: an INT8 prediction may differ from the student's report only on a sample near a decision
boundary (``grader.context.near_boundary``). Those samples are named in the feedback.
"""
from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from grader import own_code, sandbox
from grader.context import (
    HIDDEN,
    MARGIN,
    SCALE_REL,
    Context,
    charged_under,
    check,
    common_claims,
    evaluation,
    fp32_outputs,
    near_boundary,
    number,
    share_left,
    value,
)
from grader.group import Group
from grader.mistakes import SUMMARY_PERCENTAGE, SUMMARY_TRANSPOSED, Mistake
from grader.results import Evidence
from lab import compare, data, graph
from lab.data import EPSILON
from lab.lessons.lesson06_accept_or_reject import acceptance
from lab.lessons.lesson06_accept_or_reject.acceptance import FLOOR, LIMIT

PART = "acceptance"
# The hidden check's own limit, looser than the lab's LIMIT: it asks only whether the candidate generalizes to
# images no one tuned on, not whether it meets the lesson's limit a second time
HELDOUT_LIMIT = 0.02
SUMMARY_COST = 1.5     # summarize() returns a wrong summary (counts, accuracy or a transposed confusion)
ERROR_CASE_COST = 0.5  # summarize() returns instead of raising on one kind of bad input
NAMES = ("fp32", "candidate", "bad")  # the models regression.json reports, under models/<name>
TRANSPOSED = "confusion is the transpose of the recomputed one"
# A reported row sum is compared with the recomputed one within the lab's own tolerance for a row
# (acceptance.probability_tolerance: 10 classes x half a grid step, 0.0196 for INT8; 1e-4 for FP32), not a looser
# one: measured on the reference hand-in made as each kernel family and recomputed as each, the sums differ by 0
# under the hand-in's own family (the grader's) and by one 1/255 grid step, a fifth of the tolerance, under the other
WHY_PROB = ("lab.lessons.lesson06_accept_or_reject.acceptance.probability_tolerance of the model's output grid: "
            "a row of 10 quantized probabilities may miss 1 by half a grid step each")


def _summary(probs: np.ndarray, labels: np.ndarray) -> dict:
    """The grader's summary of a model's outputs: lesson 06's ``summarize`` and the predictions it counted."""
    predictions = probs.argmax(1)
    return {**summarize(predictions, labels), "predictions": predictions.tolist()}


def _probs(ctx: Context, name: str) -> np.ndarray:
    if name == "fp32":
        return fp32_outputs()
    if name == "bad":
        return compare.predict(data.fixture_path("bad-calibration.onnx"), evaluation()[0])
    return ctx.outputs("candidate.onnx")


def _reported(doc: dict, name: str) -> dict:
    """regression.json's record of one model (the schema requires all three under ``models``)."""
    return doc["models"][name]


def run_gate(ctx: Context) -> list:
    """The FP32 model reaches the gate, judged on the student's own lesson 06 run: its regression.json records FP32,
    whose accuracy is recomputed here from the fixture (what it reports is the summaries' check). Without that file
    the gate is not earned (a hand-in without lesson 06 earns no point of it), unless summarize()'s percentage kept
    lesson 06 from writing it: that is charged under summarize_code and named here."""
    if not ctx.has(REGRESSION):
        return _without_regression(ctx, ("fp32_gate",))
    reported = number(value(_reported(ctx.doc(REGRESSION), "fp32"), "accuracy"))
    _, labels = evaluation()
    acc = _summary(fp32_outputs(), labels)["accuracy"]
    reaches = acceptance.decide(acc, acc).accept  # no loss: only the floor decides
    said = "no accuracy" if reported is None else f"{reported:.4f}"
    return [check(PART, "fp32_gate", float(reaches),
                  f"FP32 accuracy {acc:.4f} on {len(labels)} evaluation images (gate {FLOOR}), recomputed for the "
                  f"FP32 record of your regression.json (it reports {said})")]


REGRESSION = "regression.json"


def _without_regression(ctx: Context, names: tuple[str, ...] = ("summaries", "probabilities", "decisions")) -> list:
    """regression.json is missing: its checks ``names`` score 0. When summarize() returned a percentage (charged under
    summarize_code), lesson 06 could not write it (its schema takes a 0-1 ratio): the consequence is named, not
    charged again."""
    if ctx.charged(SUMMARY_PERCENTAGE):
        why = (f"{REGRESSION} is not in the submission because of the mistake above: {SUMMARY_PERCENTAGE.wording}, "
               "and lesson 06 cannot write a percentage into regression.json (a 0-1 ratio). "
               "Return correct / count in metrics.py, re-run lesson 06, then hand in again; "
               + SUMMARY_PERCENTAGE.charged_under())
        return [check(PART, name, 1, why) for name in names]
    why = (f"{REGRESSION} is not in the submission: lesson 06 writes it into the workspace; run that lesson, "
           "then hand in again")
    return [check(PART, name, 0, why) for name in names]


def run(ctx: Context) -> list:
    if not ctx.has(REGRESSION):
        return _without_regression(ctx)
    doc = ctx.doc(REGRESSION)
    _, labels = evaluation()
    probs = {name: _probs(ctx, name) for name in NAMES}
    mine = {name: _summary(p, labels) for name, p in probs.items()}
    out = []
    good, msgs, ev, transposed = 0, [], [], False
    charged = ctx.charged(SUMMARY_TRANSPOSED)
    for name in NAMES:
        rep = _reported(doc, name)
        ok, msg, evs, shown = _compare_summary(name, rep, mine[name], probs[name], exact=(name == "fp32"),
                                               transposed_charged=charged)
        transposed |= shown
        file_wrong = _file_facts(ctx, name, rep) if rep else []
        if name == "fp32":  # the file's own inputs: charged once, with the first model
            file_wrong += common_claims(doc, "regression.json")
        if file_wrong:
            ok, msg = False, msg + (", but " if ok else ", ") + ", ".join(file_wrong)
        good += ok
        msgs.append(msg)
        ev += evs
    text = "; ".join(msgs)
    if transposed:
        text += (". Rows must be the actual class and columns the predicted one: fix summarize() in metrics.py, "
                 "then re-run lesson 06")
    out.append(check(PART, "summaries", good / 3, text, ev))
    out.append(_probabilities(doc, probs, _paths(ctx)))
    out.append(_decisions(doc, mine, probs))
    return out


def _paths(ctx: Context) -> dict:
    return {"fp32": data.fixture_path("fp32.onnx"), "candidate": ctx.sub.path("candidate.onnx"),
            "bad": data.fixture_path("bad-calibration.onnx")}


FILE_NAMES = {"fp32": "source.onnx", "candidate": "candidate.onnx", "bad": "bad-calibration.onnx"}


def _file_facts(ctx: Context, name: str, rep: dict) -> list[str]:
    """A model's reported hash and storage evidence (bytes, weight dtypes) against its file.

    The kernels in the evidence are left alone: they are the execution profile of the student's CPU.
    """
    path = _paths(ctx)[name]
    wrong = []
    if "file" in rep and rep["file"] != FILE_NAMES[name]:
        wrong.append(f"file is {rep['file']!r}; lesson 06 measures {FILE_NAMES[name]}")
    if value(rep, "sha256") != data.file_sha256(path):
        wrong.append(f"sha256 is not the hash of {path.name}")
    size = value(rep, "evidence.size_bytes")
    if size != path.stat().st_size or isinstance(size, bool):
        wrong.append(f"evidence size_bytes {size}, the file has {path.stat().st_size}")
    dtypes = value(rep, "evidence.weight_dtypes")
    if dtypes != graph.weight_dtypes(path):
        wrong.append(f"evidence weight_dtypes {dtypes}, the file stores {graph.weight_dtypes(path)}")
    return wrong


def run_candidate(ctx: Context) -> list:
    """candidate.onnx is a per-channel QDQ model, not the FP32 model renamed: it needs only that file."""
    model = ctx.model("candidate.onnx")
    fmt = graph.quant_format(model)
    same = ctx.sub.files.get("candidate.onnx") == data.file_sha256(data.fixture_path("fp32.onnx"))
    per_channel = graph.per_channel(model)
    ok = fmt == "QDQ" and per_channel and not same
    why = ("candidate.onnx is the FP32 model renamed (same SHA-256 as fixtures/fp32.onnx)" if same else
           f"candidate.onnx is a {fmt} model, weights {'per channel' if per_channel else 'per tensor'}")
    return [check(PART, "candidate", float(ok), why + ("" if ok else "; expected quantize_static with "
                                                       "quant_format QDQ and per_channel=True"))]


def _compare_summary(name: str, rep: dict, mine: dict, probs: np.ndarray, exact: bool,
                     transposed_charged: bool = False) -> tuple[bool, str, list[Evidence], bool]:
    """(right, message, evidence, whether the message charges a transposed confusion) for one model's summary."""
    if not rep:
        return False, f"{name}: no summary reported in regression.json", [], False
    count_rep, correct_rep = value(rep, "count"), value(rep, "correct")
    acc_rep = number(value(rep, "accuracy"))
    conf_rep = np.asarray(value(rep, "confusion", default=[]), dtype=object)
    near = [] if exact else near_boundary(probs).tolist()
    allowed = len(near)
    why = ("FP32: exact, the float model is the fixture" if exact else
           f"near-boundary policy: {allowed} sample(s) with a top-2 margin within {MARGIN:.4f} may flip")
    ev = [Evidence(f"{name} count", count_rep, mine["count"], 0, "exact"),
          Evidence(f"{name} correct", correct_rep, mine["correct"], allowed, why),
          Evidence(f"{name} accuracy", acc_rep, mine["accuracy"], allowed / mine["count"] + EPSILON, why)]
    problems, notes, transposed_here = [], [], False
    if count_rep != mine["count"]:
        problems.append(f"count {count_rep}, expected {mine['count']}")
    if not isinstance(correct_rep, int) or abs(correct_rep - mine["correct"]) > allowed:
        problems.append(f"correct {correct_rep}, recomputed {mine['correct']}")
    if acc_rep is None or abs(acc_rep - mine["accuracy"]) > allowed / mine["count"] + EPSILON:
        problems.append(f"accuracy {acc_rep}, recomputed {mine['accuracy']:.4f} (a 0-1 ratio)")
    if conf_rep.shape != (10, 10):
        problems.append("confusion is not 10x10")
    else:
        conf_rep = np.asarray(conf_rep.tolist(), dtype=float)
        diff = np.abs(conf_rep - np.asarray(mine["confusion"])).sum()
        transposed = np.abs(conf_rep - np.asarray(mine["confusion"]).T).sum()
        if diff > 2 * allowed and transposed == 0 and transposed_charged:
            notes.append(f"{TRANSPOSED}, written by your summarize(): {SUMMARY_TRANSPOSED.charged_under()}")
        elif diff > 2 * allowed:
            transposed_here = transposed == 0
            problems.append(TRANSPOSED if transposed_here else
                            f"confusion differs from the recomputed one in {int(diff)} count(s)")
    preds = value(rep, "predictions")
    if isinstance(preds, list) and len(preds) == len(mine["predictions"]):
        differ = [i for i, (a, b) in enumerate(zip(preds, mine["predictions"])) if a != b]
        outside = [i for i in differ if i not in set(near)]
        if differ:
            ev.append(Evidence(f"{name} samples predicted differently", differ[:20], near[:20], "near-boundary only",
                               "these sample indices differ; allowed only where the top-2 margin is within the grid"))
        if outside:
            problems.append(f"predictions differ on samples {outside[:10]}, which are not near a decision boundary")
    if problems:
        return False, f"{name}: " + ", ".join(problems), ev, transposed_here
    note = f" (samples near a boundary: {near[:10]})" if near else ""
    note += "".join(f"; {n}" for n in notes)
    return True, f"{name}: {mine['correct']}/{mine['count']} recomputed{note}", ev, False


def _probabilities(doc: dict, probs: dict, paths: dict):
    """Each model's reported row sums, tolerance and verdict, recomputed with lesson 06's calls
    (lab.lessons.lesson06_accept_or_reject.acceptance.probability_tolerance from the graph's output scale,
    check_probabilities); a reported sum may differ from the recomputed one by that tolerance (WHY_PROB)."""
    ok_count, msgs, ev = 0, [], []
    for name, p in probs.items():
        tol = acceptance.probability_tolerance(graph.output_scale(paths[name]))
        mine = acceptance.check_probabilities(p, tol)
        mins = mine.min_sum
        rec = _reported(doc, name)["probabilities"]  # min_sum, max_sum, tolerance and ok: all required
        rep = float(rec["min_sum"])
        ev.append(Evidence(f"{name} minimum row sum", rep, mins, tol, WHY_PROB))
        good = abs(rep - mins) <= tol
        wrong = []
        if abs(rec["max_sum"] - mine.max_sum) > tol:
            wrong.append(f"max_sum {rec['max_sum']}, recomputed {mine.max_sum:.4f}")
        if abs(rec["tolerance"] - tol) > SCALE_REL * tol:
            wrong.append(f"tolerance {rec['tolerance']}, lab.lessons.lesson06_accept_or_reject.acceptance."
                         f"probability_tolerance gives {tol:.6g}")
        if rec["ok"] is not mine.ok:
            wrong.append(f"ok {rec['ok']}, lab.lessons.lesson06_accept_or_reject.acceptance.check_probabilities "
                         f"says {mine.ok}")
        good = good and not wrong
        ok_count += good
        msgs.append(f"{name}: min row sum {mins:.4f}, rules {'hold' if mine.ok else 'broken'}"
                    + ("" if good or wrong else f" (reported {rep})") + "".join(f"; {w}" for w in wrong))
    return check(PART, "probabilities", ok_count / len(probs), "; ".join(msgs)
                 + ("" if ok_count == len(probs) else ". Report each model's minimum row sum as probabilities.min_sum"),
                 ev)


def _decisions(doc: dict, mine: dict, probs: dict):
    fp32 = mine["fp32"]["accuracy"]
    n = mine["fp32"]["count"]
    loss = fp32 - mine["candidate"]["accuracy"]
    bad_loss = fp32 - mine["bad"]["accuracy"]
    slack = len(near_boundary(probs["candidate"])) / n
    accept = acceptance.decide(fp32, mine["candidate"]["accuracy"]).accept
    reject = not acceptance.decide(fp32, mine["bad"]["accuracy"]).accept
    rep_accept, rep_reject = value(doc, "accept_candidate"), value(doc, "reject_bad")
    score, msgs = 0.0, []
    borderline = abs(loss - LIMIT) <= slack
    if rep_accept is accept or (borderline and isinstance(rep_accept, bool)):
        score += 0.5
        msgs.append(f"accept_candidate {rep_accept}: loss {loss:.4f} vs limit {LIMIT}"
                    + (" (on the boundary: either decision accepted)" if borderline else ""))
    else:
        msgs.append(f"accept_candidate is {rep_accept}, but the recomputed loss {loss:.4f} against the limit "
                    f"{LIMIT} says {accept}: compute the decision from the numbers")
    if rep_reject is reject:
        score += 0.5
        msgs.append(f"reject_bad {rep_reject}: the bad model loses {bad_loss:.4f}")
    else:
        msgs.append(f"reject_bad is {rep_reject}, but the bad model's recomputed loss {bad_loss:.4f} says {reject}: "
                    "a decision must follow from the numbers, not be written in")
    ev = [Evidence("candidate loss", number(value(doc, "loss")), loss, slack, "near-boundary policy on the candidate"),
          Evidence("accept_candidate", rep_accept, accept, None, "recomputed from the grader's accuracies"),
          Evidence("reject_bad", rep_reject, reject, None, "recomputed from the grader's accuracies")]
    bad_slack = len(near_boundary(probs["bad"])) / n
    for field, want, tol in (("loss", loss, slack + EPSILON), ("bad_loss", bad_loss, bad_slack + EPSILON)):
        got = number(value(doc, field))
        if field in doc and (got is None or abs(got - want) > tol):  # FP32 accuracy minus the model's
            score = max(0.0, score - 0.25)
            msgs.append(f"regression.json {field} is {value(doc, field)}, recomputed {want:.4f} (FP32 accuracy "
                        "minus the model's)")
    for field, want in (("floor", FLOOR), ("limit", LIMIT), ("epsilon", EPSILON)):  # the lab's, not the student's
        if field == "epsilon" and field not in doc:
            continue
        got = number(value(doc, field))
        if got is None or abs(got - want) > 1e-12 * max(1.0, want) or (field == "epsilon" and got != want):
            score = max(0.0, score - 0.25)  # half a point of decisions
            msgs.append(f"regression.json {field} is {value(doc, field)}; lesson 06's is {want}: the decisions are "
                        "taken against the lab's numbers")
    own = _own_decisions(doc)
    if own is not None:
        own_accept, own_reject = own
        if (rep_accept, rep_reject) != (own_accept, own_reject):
            score = 0.0
            msgs.append(f"the decisions do not follow from your own numbers in regression.json (they give "
                        f"accept_candidate {own_accept}, reject_bad {own_reject}): compute each decision from "
                        "the accuracies, never write it in")
    return check(PART, "decisions", score, "; ".join(msgs), ev)


def _own_decisions(doc: dict) -> tuple[bool, bool] | None:
    """The decisions the student's own reported accuracies imply (None if they are not all there)."""
    acc = {name: number(value(_reported(doc, name), "accuracy")) for name in NAMES}
    fp32, candidate, bad = acc["fp32"], acc["candidate"], acc["bad"]
    if fp32 is None or candidate is None or bad is None:
        return None
    floor = number(value(doc, "floor")) or FLOOR
    limit = number(value(doc, "limit")) or LIMIT
    return (acceptance.decide(fp32, candidate, floor=floor, limit=limit).accept,
            not acceptance.decide(fp32, bad, floor=floor, limit=limit).accept)


# ----- hidden checks: held-out data and the instructor's secret -----

def summarize_cases(seed_text: str | None) -> list[dict]:
    """Short lists for summarize(): the lesson's example, the transposition trap, the errors it must raise."""
    cases: list[dict] = [
             {"name": "example", "labels": [1, 2, 1, 0, 9], "predictions": [2, 2, 1, 0, 8]},
             {"name": "mismatched lengths", "labels": [1, 2, 3], "predictions": [1, 2], "must_raise": True},
             {"name": "label outside 0-9", "labels": [1, 12], "predictions": [1, 2], "must_raise": True},
             {"name": "prediction outside 0-9", "labels": [1, 2], "predictions": [1, -1], "must_raise": True},
             {"name": "empty", "labels": [], "predictions": [], "must_raise": True}]
    rng = random.Random(hashlib.sha256((seed_text or "calibration-lab").encode()).digest())
    labels = [rng.randrange(10) for _ in range(23)]
    preds = [t if rng.random() < 0.6 else rng.randrange(10) for t in labels]
    cases.append({"name": "secret", "labels": labels, "predictions": preds})
    return cases


class SummaryError(ValueError):
    """Predictions and labels that cannot be summarized."""


def _digits(values, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.number):
        raise SummaryError(f"{what} must hold digits 0-9; got {arr.dtype} values such as {arr.ravel()[0]!r}")
    if arr.ndim != 1:
        raise SummaryError(f"{what} must be a flat list of digits; got shape {list(arr.shape)}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.equal(np.mod(arr, 1), 0)):
            raise SummaryError(f"{what} must be whole digits 0-9; got {arr.dtype} values such as {arr[0]!r}")
        arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= 10)
    if bad.any():
        i = int(np.argmax(bad))
        raise SummaryError(f"{what}[{i}] is {arr[i]}; every {what[:-1]} must be a digit 0-9")
    return arr.astype(np.int64)


def summarize(predictions, labels) -> dict:
    """The reference for lesson 06's exercise (instructor-side: it is the exercise's answer, so not in the kit).

    Count, correct, accuracy (0-1) and the 10x10 confusion matrix (rows actual, columns predicted):
    an actual 1 read as 2 increments ``confusion[1][2]``. Raises ``SummaryError`` (a ``ValueError``)
    on empty input, mismatched lengths, or a value outside 0-9. Lesson 06's hidden tests compare the
    student's ``metrics.summarize`` with it, and the grader's own summaries of the three models are its (``_summary``).
    """
    if len(predictions) != len(labels):
        raise SummaryError(f"predictions has {len(predictions)} items but labels has {len(labels)}; "
                           "they must pair up one to one")
    if len(labels) == 0:
        raise SummaryError("predictions and labels are empty; there is nothing to summarize")
    p, y = _digits(predictions, "predictions"), _digits(labels, "labels")
    confusion = np.zeros((10, 10), dtype=np.int64)
    np.add.at(confusion, (y, p), 1)
    correct = int(np.trace(confusion))
    return {"count": int(len(y)), "correct": correct, "accuracy": correct / len(y),
            "confusion": confusion.tolist()}


def expected_summary(case: dict) -> dict:
    return summarize(case["predictions"], case["labels"])


@dataclass(frozen=True)
class SummaryKind:
    """A kind of wrong summary: what the instructor's lists may show of it (``_without_values``: never a value expected
    on them; None: shown as it is, it names no value), and the registry's mistake when a later group names it."""

    secret_words: str | None
    mistake: Mistake | None = None


# The mistakes a summary can hold, one charge each however many lists show it (``_same`` names the first it finds)
SUMMARY_MISTAKES = MappingProxyType({
    "not_a_dict": SummaryKind(None),
    "count": SummaryKind("its count is wrong"),
    "correct": SummaryKind("its correct is wrong"),
    "percentage": SummaryKind("its accuracy is a percentage, not a 0-1 ratio", SUMMARY_PERCENTAGE),
    "accuracy": SummaryKind("its accuracy is wrong"),
    "confusion_table": SummaryKind("its confusion is not a 10x10 table of counts"),
    "transposed": SummaryKind(None, SUMMARY_TRANSPOSED),
    "confusion": SummaryKind("its confusion does not match the counts"),
})


def _same(got, want: dict) -> tuple[str, str]:
    """(kind, what is wrong) for the first mistake of ``SUMMARY_MISTAKES`` the summary holds; ("", "") if none."""
    if not isinstance(got, dict):
        return "not_a_dict", (f"returned a {type(got).__name__}, expected a dict with count, correct, accuracy, "
                              "confusion")
    for key in ("count", "correct"):
        if got.get(key) != want[key]:
            return key, f"{key} is {got.get(key)!r}, expected {want[key]}"
    acc = number(got.get("accuracy"))
    if acc is not None and abs(acc - 100 * want["accuracy"]) <= 0.01 + EPSILON and want["accuracy"]:
        return "percentage", (f"accuracy is a percentage ({got.get('accuracy')!r} for {want['accuracy']:.4f}): "
                              "return correct / count (a 0-1 ratio)")
    if acc is None or abs(acc - want["accuracy"]) > EPSILON:
        return "accuracy", f"accuracy is {got.get('accuracy')!r}, expected {want['accuracy']:.4f} (a 0-1 ratio)"
    conf = got.get("confusion")
    try:
        conf = np.asarray(conf, dtype=float)
    except (TypeError, ValueError):
        return "confusion_table", "confusion is not a 10x10 table of counts"
    if conf.shape != (10, 10):
        return "confusion_table", f"confusion has shape {list(conf.shape)}, expected 10x10"
    if not np.array_equal(conf, want["confusion"]):
        if np.array_equal(conf.T, want["confusion"]):
            return "transposed", ("confusion is transposed: rows must be the actual class and columns the predicted "
                                  "one (an actual 1 read as 2 increments confusion[1][2])")
        return "confusion", "confusion does not match the counts"
    return "", ""


def _without_values(kind: str, problem: str, res: dict) -> str:
    """What went wrong on the instructor's lists, without the expected numbers (they would reveal the lists)."""
    if "raised" in res:
        return f"raised {str(res['raised'])[:40]}"
    known = SUMMARY_MISTAKES.get(kind)
    return (known.secret_words if known else None) or problem


def _cases() -> list[dict]:
    """Every list summarize() is run on: the lesson's, the instructor's (from the secret), and the evaluation set's."""
    cases = summarize_cases(sandbox.secret())
    pixels_labels = evaluation()[1]
    candidate_pred = fp32_outputs().argmax(1).tolist()
    cases.append({"name": "fp32 on the evaluation set", "labels": pixels_labels.tolist(),
                  "predictions": candidate_pred})
    return cases


def _metrics_request(ctx: Context, cases: list[dict]) -> sandbox.Request:
    """``sandbox.run``'s arguments for the run of the student's summarize() on ``cases``."""
    return (ctx.sub.root, {"task": "metrics", "module": "metrics", "function": "summarize",
                           "cases": [{k: c[k] for k in ("name", "labels", "predictions")} for c in cases]},
            None, ctx.limits)


def summarize_runs(ctx: Context) -> list[sandbox.Request]:
    """The summarize() run ``run_summarize`` asks for (its group's ``request``, planned ahead), if it will run
    metrics.py at all."""
    if not ctx.has("metrics.py") or own_code.refusal_for(ctx.sub.path("metrics.py"), "metrics.py"):
        return []
    return [_metrics_request(ctx, _cases())]


class CaseMistake(NamedTuple):
    """One mistake of summarize() on the cases, charged once whichever cases show it: one field is set."""

    summary: str = ""     # a wrong summary: its ``SUMMARY_MISTAKES`` kind
    raised: str = ""      # the exception it raised where a summary was due
    must_raise: str = ""  # the error case that returned a summary instead of raising


def _case_problems(cases: list[dict], returned: list) -> tuple[dict[CaseMistake, tuple[str, list[str]]], str]:
    """What summarize() did wrong on the cases the child ran: {mistake: (its words on the first case that shows it,
    the cases that show it)}; and the secret case's problem without its values."""
    got = {c.get("name"): c for c in returned if isinstance(c, dict)}
    secret_msg = ""
    by_problem: dict[CaseMistake, tuple[str, list[str]]] = {}
    for case in cases:
        res = got.get(case["name"], {})
        if case.get("must_raise"):
            key = CaseMistake() if "raised" in res else CaseMistake(must_raise=case["name"])
            problem = f"returned {str(res.get('returned'))[:60]} instead of raising an error"
        elif "raised" in res:
            key, problem = CaseMistake(raised=str(res["raised"])), f"raised {res['raised']}: {res.get('message', '')}"
        else:
            kind, problem = _same(res.get("returned"), expected_summary(case))
            key = CaseMistake(summary=kind)
        if case["name"] == "secret":
            secret_msg = _without_values(key.summary, problem, res) if any(key) else ""
            continue
        if any(key):
            by_problem.setdefault(key, (problem, []))[1].append(case["name"])
    return by_problem, secret_msg


def run_summarize(ctx: Context) -> list:
    refused = own_code.refusal_for(ctx.sub.path("metrics.py"), "metrics.py")
    if refused:  # it would pass on the lab's code, not the student's: nothing of it is run
        return [check(PART, "summarize_code", 0, refused),
                check(HIDDEN, "secret_summarize", 0, refused, hidden=True)]
    cases = _cases()
    child = ctx.grading.sandbox.run(*summarize_runs(ctx)[0])
    if child.status != "ok" or not child.data.get("ok"):
        if child.status == "timeout":
            ctx.timed_out = True
        why = child.message or child.data.get("error", "")
        if child.status == "refused":  # no isolation layer: nothing of the student's was run, nor judged
            return [check(PART, "summarize_code", 0, f"metrics.py could not be run: {why}"),
                    check(HIDDEN, "secret_summarize", 0, f"metrics.py could not be run: {why}", hidden=True)]
        # the student's module failed (import error, time limit, crash): one mistake, charged once
        return [check(PART, "summarize_code", 0, f"metrics.py could not be run: {why}"),
                check(HIDDEN, "secret_summarize", 1, "metrics.py could not be run on the instructor's lists "
                      f"either; {charged_under(PART, 'summarize_code')}", hidden=True, assessed=False)]
    by_problem, secret_msg = _case_problems(cases, child.data.get("cases", []))
    # one charge per mistake: a wrong summary (whatever lists show it) costs SUMMARY_COST, each error case
    # that does not raise ERROR_CASE_COST; the same summary mistake on the instructor's lists is not charged again
    cost, msgs = 0.0, []
    for key, (problem, names) in by_problem.items():
        cost += ERROR_CASE_COST if key.must_raise else SUMMARY_COST
        if key.must_raise:
            problem = "returned a summary instead of raising an error (a ValueError that says what is wrong)"
        msgs.append(f"{', '.join(names)}: {problem}")
        kind = SUMMARY_MISTAKES.get(key.summary)
        if kind is not None and kind.mistake is not None:
            ctx.charge(kind.mistake)
    main = check(PART, "summarize_code", share_left(PART, "summarize_code", cost),
                 "summarize() passes the lesson's example, the transposition trap, the error cases (mismatched "
                 "lengths, a label or prediction outside 0-9, empty lists) and the evaluation set"
                 if not msgs else "summarize() " + "; ".join(msgs))
    visible_wrong = any(not k.must_raise for k in by_problem)
    if secret_msg and visible_wrong:
        hidden = check(HIDDEN, "secret_summarize", 1.0, "summarize() on the instructor's lists: the same kind "
                       f"of mistake as on the lesson's lists; {charged_under(PART, 'summarize_code')}", hidden=True)
    else:
        hidden = check(HIDDEN, "secret_summarize", 0.0 if secret_msg else 1.0,
                       f"summarize() on the instructor's lists: {secret_msg or 'correct'}", hidden=True)
    return [main, hidden]


def run_heldout(ctx: Context) -> list:
    split = data.load_split("heldout")
    cand = ctx.outputs("candidate.onnx", split.pixels, key="heldout")
    fp32 = compare.predict(data.fixture_path("fp32.onnx"), split.pixels)
    acc_c = float((cand.argmax(1) == split.labels).mean())
    acc_f = float((fp32.argmax(1) == split.labels).mean())
    loss = acc_f - acc_c
    ok = loss <= HELDOUT_LIMIT
    # the kind of failure, never the held-out numbers (they would let a student tune to the held-out split)
    return [check(HIDDEN, "heldout", float(ok),
                  f"on {len(split)} held-out images the candidate's accuracy loss against FP32 is "
                  + (f"within the limit ({HELDOUT_LIMIT})" if ok else
                     f"over the limit ({HELDOUT_LIMIT}): the candidate does not generalize; check its calibration "
                     "data"), hidden=True)]


# summarize() charges its mistakes first, and the groups that read them come after it (grader.core checks the order);
# each group needs only the files it uses (the gate uses the fixture alone)
GROUPS = (
    Group("06", PART, ("summarize_code",), run_summarize, needs=("metrics.py",), hidden=("secret_summarize",),
          charges=(SUMMARY_PERCENTAGE, SUMMARY_TRANSPOSED), request=summarize_runs),
    Group("06", PART, ("fp32_gate",), run_gate, reads=(SUMMARY_PERCENTAGE,)),
    Group("06", PART, ("summaries", "probabilities", "decisions"), run, needs=("candidate.onnx",),
          reads=(SUMMARY_PERCENTAGE, SUMMARY_TRANSPOSED)),
    Group("06", PART, ("candidate",), run_candidate, needs=("candidate.onnx",)),
    Group("06", PART, (), run_heldout, needs=("candidate.onnx",), hidden=("heldout",)),
)
