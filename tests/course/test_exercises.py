"""attnlab.course.exercises: each exercise accepts its worked answer and the library's number, refuses the
usual mistakes with a hint that does not give the number away, reads junk without raising, and
the numbers it accepts agree with the lecture's hand arithmetic (so a library change shows here).
The notebook's answer cells start empty (None, "unanswered" with the form to write); the worked
answers live in its folded cells, and are read from there."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from attnlab.course import exercises
from attnlab.course.exercises import FORMS, TOLERANCE, TOLERANCE_ABS, check, expected
from attnlab.machine.hardware import ridge_point
from attnlab.core.mla import mla_intensity

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_exercises.ipynb"
CELLS = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _text(cell) -> str:
    return "".join(cell["source"])


def _worked_answers() -> dict:
    """Exercise n -> the value the notebook's folded worked answer gives as its answer cell."""
    out = {}
    for cell in CELLS:
        t = _text(cell)
        n = re.match(r"## 练习 (\d) ", t)
        if n:
            current = int(n.group(1))
        if cell["cell_type"] == "markdown" and t.startswith("<details><summary>Worked answer"):
            found = re.findall(r"\*\*As the answer cell:\*\* `answer = (.+?)`", t)
            assert len(found) == 1, t[:80]
            assert current not in out
            out[current] = ast.literal_eval(found[0])
    return out


# The worked answers as the notebook writes them (the lecture's rounded numbers).
WORKED = _worked_answers()


def test_notebook_has_one_worked_answer_per_exercise():
    assert sorted(WORKED) == list(range(1, 10))


@pytest.mark.parametrize("n", range(1, 10))
def test_worked_answer_is_right(n):
    r = check(n, WORKED[n])
    assert r.ok, str(r)
    assert str(r).startswith(f"exercise {n}: right — ") and "\n" not in str(r)


@pytest.mark.parametrize("n", range(1, 10))
def test_library_values_are_right(n):
    assert check(n, expected(n)).ok


def test_plain_numbers_and_other_spellings_are_accepted():
    assert check(3, 9_355_264).ok and check(3, np.int64(9_355_264)).ok and check(3, 9_355_264.0).ok
    assert check(6, 8.0).ok and check(6, np.int32(8)).ok
    assert check(5, ["D", "a", "c"]).ok and check(8, ("g", "f", "d", "c", "a")).ok
    assert check(9, {"block_size": 1, "kv_blocks": 10, "partial": 3}).ok
    assert check(
        1,
        {
            "steps": np.array([[2, 1], [2, 1.3679], [4, 1.1851]]),
            "softmax": np.array([0.1142, 0.0420, 0.8438]),
        },
    ).ok


# --- the accepted numbers, recomputed by hand from the lecture's arithmetic -------------------------


def test_hand_exercise_1():
    l2 = 1 + math.exp(1 - 2)
    l3 = l2 * math.exp(2 - 4) + math.exp(4 - 4)
    e = expected(1)
    assert [m for m, _ in e["steps"]] == [2, 2, 4]
    assert [l for _, l in e["steps"]] == pytest.approx([1, l2, l3], rel=1e-12)
    assert e["softmax"] == pytest.approx([math.exp(x - 4) / l3 for x in (2, 1, 4)], rel=1e-12)
    assert round(l2, 4) == 1.3679 and round(l3, 4) == 1.1851


def test_exercise_1_accepts_two_decimals_as_the_prompt_states():
    # the rule: within 1 % of the value or within 0.005 of it, whichever is larger
    assert (TOLERANCE[1], TOLERANCE_ABS[1]) == (0.01, 0.005)
    two = {"steps": [(2, 1), (2, 1.37), (4, 1.19)], "softmax": [0.11, 0.04, 0.84]}
    assert check(1, two).ok, str(check(1, two))
    prompt = next(_text(c) for c in CELLS if _text(c).startswith("## 练习 1 "))
    assert "within 1 % of its value or within 0.005 of it, whichever is larger" in prompt
    e = expected(1)
    p = e["softmax"]

    def with_softmax(i, v):
        q = list(p)
        q[i] = v
        return check(1, {"steps": e["steps"], "softmax": q})

    assert with_softmax(1, p[1] + 0.0049).ok  # absolute slack for the small one
    assert not with_softmax(1, p[1] + 0.0051).ok
    assert with_softmax(2, p[2] * (1 + 0.99 * TOLERANCE[1])).ok  # relative slack for the large one
    assert not with_softmax(2, p[2] * (1 + 1.01 * TOLERANCE[1])).ok


def test_exercise_1_rounding_is_named_as_rounding_not_the_method():
    one = check(1, {"steps": WORKED[1]["steps"], "softmax": [0.1, 0.0, 0.8]})  # one decimal
    assert not one.ok and "rounding" in one.hint and "e^(x_i - m)" not in one.hint
    coarse_l = check(1, {"steps": [(2, 1), (2, 1.4), (4, 1.2)], "softmax": WORKED[1]["softmax"]})
    assert not coarse_l.ok and "rounding" in coarse_l.hint
    method = check(1, {"steps": WORKED[1]["steps"], "softmax": [0.2, 0.1, 0.7]})
    assert not method.ok and "rounding" not in method.hint and "e^(x_i - m)" in method.hint
    no_rescale = check(1, {"steps": [(2, 1), (2, 1.3679), (4, 2.3679)], "softmax": WORKED[1]["softmax"]})
    assert not no_rescale.ok and "rounding" not in no_rescale.hint


def test_hand_exercise_2():
    assert expected(2) == {"S": 32 * 32768**2 * 2, "flash_extra": 32 * 32768 * 2 * 4}
    assert expected(2)["flash_extra"] == 8 * 2**20  # the lecture's 8 MB


def test_hand_exercise_3():
    bc = -(-100_000 // (4 * 64))  # 391
    tc = -(-4096 // bc)  # 11
    assert (bc, tc) == (391, 11)
    assert expected(3) == 2 * 4096 * 64 + tc * 4096 * (3 * 64 + 4) == 9_355_264


def test_exercise_3_wants_the_count_not_the_number_its_prompt_gives():
    prompt = next(_text(c) for c in CELLS if _text(c).startswith("## 练习 3 "))
    assert "9.4 M" in prompt  # the number the prompt gives
    for given in (9.4e6, 9_400_000, np.float64(9.4e6), 9.41e6):
        r = check(3, given)
        assert not r.ok and "the question gives" in r.hint, (given, r)
    right = expected(3)
    assert TOLERANCE[3] == 0
    for rounded in (9.36e6, 9.355e6, right + 1, right - 1):
        r = check(3, rounded)
        assert not r.ok and "exact" in r.hint and "the question gives" not in r.hint, (rounded, r)


def test_hand_exercise_4():
    e = expected(4)
    assert e["a"] == pytest.approx(8 * 8192 / 8200)
    assert e["b"] == pytest.approx(128 * 8192 / 8320)
    assert e["of_ridge"] == pytest.approx(128 * 8192 / 8320 / (989.4e12 / 3.35e12))


def test_exercise_4_names_both_mla_forms_with_one_verdict():
    # absorbed: 128 heads score against the 576-wide latent row and sum its 512-wide part, per token;
    # bytes (bf16): the row once per token, plus the queries in and the outputs out
    flops = 2 * 128 * 8192 * 576 + 2 * 128 * 8192 * 512
    nbytes = 2 * (8192 * 576 + 128 * 576 + 128 * 512)
    absorbed = mla_intensity("absorbed", 8192)
    assert absorbed == pytest.approx(flops / nbytes, rel=1e-12) and round(absorbed, 1) == 234.8
    h100, h200 = ridge_point("H100-SXM", "bf16"), ridge_point("H200-SXM", "bf16")
    assert expected(4)["b"] < absorbed < h100 and h200 < absorbed  # memory-bound on the H100 either way
    said = str(check(4, WORKED[4]))
    assert "126.0" in said and "234.8" in said and "below the H100's 295" in said
    worked = next(
        _text(c) for c in CELLS if "<summary>Worked answer" in _text(c) and "ridge_point" in _text(c)
    )
    assert (
        "absorbed" in worked
        and "memory-bound either way" in worked
        and 'mla_intensity("absorbed", 8192)' in worked
    )


def test_hand_exercise_6():
    # one wave on the H100's 132 SMs: the largest split with 2 requests x 8 KV heads x splits <= 132
    assert expected(6) == max(s for s in (1, 2, 4, 8, 16, 32, 64) if 2 * 8 * s <= 132) == 8


def test_exercise_6_accepts_every_split_within_the_models_error():
    # by hand from decode_time: 8 splits fill one wave; 16 run two waves of half-size blocks, the
    # same attention time plus a larger merge: 0.4 % slower, inside the model's 1 % margin; 32: 1.1 %
    from attnlab.machine.hardware import SPLIT_MARGIN, SPLITS, decode_time

    times = {s: decode_time(2, 16384, 8, s, "H100-SXM").time for s in SPLITS}
    fastest = min(times.values())
    within = sorted(s for s, t in times.items() if t <= fastest * (1 + SPLIT_MARGIN))
    assert SPLIT_MARGIN == 0.01 and within == [8, 16] == exercises.accepted_6()
    assert times[16] / times[8] - 1 < 0.005 < SPLIT_MARGIN < times[32] / times[8] - 1
    assert check(6, 8).ok and check(6, 16).ok and not check(6, 32).ok and not check(6, 4).ok
    said = str(check(6, 16))
    assert "within the model's error" in said and "8 is the fewest" in said
    worked = next(
        _text(c) for c in CELLS if "<summary>Worked answer" in _text(c) and "best_split" in _text(c)
    )
    assert "16" in worked and "within the model's error" in worked


def test_exercise_3_tells_its_mistakes_apart():
    kv, passes, row = 2 * 4096 * 64, 11, 3 * 64 + 4
    no_lm = check(3, kv + passes * 4096 * 3 * 64)  # l and m left out
    ten = check(3, kv + 10 * 4096 * row)  # one pass too few
    twelve = check(3, kv + 12 * 4096 * row)
    no_kv = check(3, passes * 4096 * row)  # K and V left out
    assert not (no_lm.ok or ten.ok or twelve.ok or no_kv.ok)
    assert len({no_lm.hint, ten.hint, no_kv.hint}) == 3 and ten.hint == twelve.hint
    assert "l and m are missing" in no_lm.hint and "number of passes" in ten.hint
    assert "K and V are missing" in no_kv.hint


@pytest.mark.parametrize("n", [5, 8])
def test_an_incomplete_set_is_told_what_it_lacks_not_which_option(n):
    right = set(expected(n))
    prompt = next(_text(c) for c in CELLS if _text(c).startswith(f"## 练习 {n} ")).lower()
    for x in sorted(right):
        r = check(n, right - {x})
        assert not r.ok and "every statement you chose is true" in r.hint, (x, r)
        assert exercises._CHOICE_HINTS[n][x] not in r.hint and f"({x})" not in r.hint
        for word in set(exercises.CHOICES[n][x].lower().replace(",", " ").replace(".", " ").split()):
            if len(word) > 7 and word not in prompt:  # no word of the option's own
                assert word not in r.hint.lower(), (x, word, r.hint)


def test_hand_exercise_7():
    e = expected(7)
    assert (e["naive"], e["cascade"]) == (8 * (1000 + 50), 1000 + 8 * 50) == (8400, 1400)
    assert e["saving"] == pytest.approx(1 - 1400 / 8400)


def test_hand_exercise_9():
    # last query tile: rows 3968..4095; row r sees keys r-1023..r and the sinks 0..3
    first, last = 3968 - 1023, 4095
    window_blocks = set(range(first // 128, last // 128 + 1))  # 23..31
    assert expected(9) == {"block_size": 1, "kv_blocks": len(window_blocks | {0}), "partial": 3}
    # partial: block 0 (4 sinks of 128 keys), block 23 (row 3968 starts at 2945), the diagonal block
    assert first % 128 != 0 and len(window_blocks | {0}) == 10


# --- wrong answers: refused, with a hint that points at the idea, not at the number -----------------

WRONG = [
    (1, {"steps": [(2, 1), (1, 1.3679), (4, 1.1851)], "softmax": WORKED[1]["softmax"]}),  # m fell
    (1, {"steps": [(2, 1), (2, 1.3679), (4, 2.3679)], "softmax": WORKED[1]["softmax"]}),  # no rescale
    (1, {"steps": WORKED[1]["steps"], "softmax": [0.2, 0.1, 0.7]}),
    (1, {"steps": [(-2, -1), (-2, -1.3679), (-4, -1.1851)], "softmax": WORKED[1]["softmax"]}),
    (2, {"S": 68.7e9 / 32, "flash_extra": 8 * 2**20}),  # one head
    (2, {"S": 68.7e9 * 2, "flash_extra": 8 * 2**20}),  # FP32 S (or S and P)
    (2, {"S": 68.7, "flash_extra": 8 * 2**20}),  # GB, not bytes
    (2, {"S": 68.7e9, "flash_extra": 8e6}),  # MB for MiB
    (2, {"S": 68.7e9, "flash_extra": 2**18}),  # one head's m and l
    (3, 68_157_440),  # standard attention
    (3, 34_078_720),  # FA2's loop order
    (3, 8_830_976),  # K and V reads left out
    (3, 9_175_040),  # l and m left out
    (3, -9_355_264),
    (3, 9.6e6),
    (3, 9.4e6),  # the prompt's own number
    (3, 9.36e6),  # rounded: a count is exact
    (1, {"steps": WORKED[1]["steps"], "softmax": [0.1, 0.0, 0.8]}),  # one decimal
    (4, {"a": 8.2, "b": 126, "of_ridge": 0.427}),
    (4, {"a": 7.99, "b": 128, "of_ridge": 0.427}),  # "about g"
    (4, {"a": 7.99, "b": 126, "of_ridge": 2.34}),  # ridge / I
    (4, {"a": -7.99, "b": 126, "of_ridge": 0.427}),
    (5, {"a", "c"}),
    (5, {"a", "b", "c", "d"}),
    (5, {"e"}),
    (6, 32),
    (6, 4),
    (6, 1),
    (6, 64),
    (6, 3),
    (6, -8),
    (6, 8.5),
    (7, {"naive": 8000, "cascade": 1400, "saving": 0.833}),
    (7, {"naive": 8400, "cascade": 1050, "saving": 0.833}),
    (7, {"naive": 8400, "cascade": 1400, "saving": 83.3}),  # a percentage
    (7, {"naive": 8400, "cascade": 1400, "saving": 0.167}),  # cascade / naive
    (7, {"naive": 8400, "cascade": 1400, "saving": -0.833}),
    (8, {"a", "c", "d", "f"}),
    (8, {"a", "b", "c", "d", "f", "g"}),
    (8, {"e", "h"}),
    (9, {"block_size": 16, "kv_blocks": 10, "partial": 3}),
    (9, {"block_size": (1, 16), "kv_blocks": 10, "partial": 3}),
    (9, {"block_size": 1, "kv_blocks": 9, "partial": 3}),  # sinks' block left out
    (9, {"block_size": 1, "kv_blocks": 32, "partial": 3}),  # the whole row
    (9, {"block_size": 1, "kv_blocks": 10, "partial": 2}),
]


def _right_strings(n) -> list[str]:
    """The right numbers as a hint might spell them."""
    e = expected(n)
    if n == 1:
        values = [l for _, l in e["steps"][1:]] + e["softmax"]
    elif isinstance(e, dict):
        values = list(e.values())
    elif isinstance(e, set):
        return []
    else:
        values = [e]
    out = []
    for v in values:
        out += [f"{v:,}", f"{v:g}", f"{v:.3g}", f"{v:.2f}", f"{v:.4f}", f"{v:.0%}"]
        if float(v).is_integer():
            out.append(str(int(v)))
        if v >= 1e6:
            out += [f"{v / 1e6:.3g} M", f"{v / 1e9:.3g} GB", f"{v / 2**20:.3g} MiB"]
    return sorted(set(out))


@pytest.mark.parametrize("n,answer", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answer_gets_a_hint_without_the_number(n, answer):
    r = check(n, answer)
    assert not r.ok
    assert r.hint.strip() and str(r).startswith(f"exercise {n}: not yet — hint: ") and "\n" not in str(r)
    for s in _right_strings(n):
        assert not re.search(rf"(?<![\w.,]){re.escape(s)}(?![\w%]|[.,]\d)", r.hint), (s, r.hint)


def test_hints_name_the_idea_of_known_mistakes():
    assert "standard attention" in check(3, 68_157_440).hint
    assert "FA2" in check(3, 34_078_720).hint
    assert "one head" in check(2, {"S": 68.7e9 / 32, "flash_extra": 8 * 2**20}).hint
    assert "unit" in check(2, {"S": 68.7, "flash_extra": 8 * 2**20}).hint
    assert "prefix" in check(2, {"S": 68.7e9, "flash_extra": 8e6}).hint
    assert "not just g" in check(4, {"a": 7.99, "b": 128, "of_ridge": 0.427}).hint
    assert "merge" in check(6, 32).hint and "idle" in check(6, 4).hint
    assert "between 0 and 1" in check(7, {"naive": 8400, "cascade": 1400, "saving": 83.3}).hint


def test_tolerance_is_the_stated_one():
    e = expected(4)
    assert check(4, {**e, "b": e["b"] * (1 + 0.99 * TOLERANCE[4])}).ok
    assert not check(4, {**e, "b": e["b"] * (1 + 1.01 * TOLERANCE[4])}).ok
    assert not check(3, expected(3) + 1).ok  # a count is exact
    e = expected(2)
    assert check(2, {"S": e["S"] * (1 - 0.99 * TOLERANCE[2]), "flash_extra": e["flash_extra"]}).ok
    assert not check(2, {"S": e["S"] * (1 - 1.01 * TOLERANCE[2]), "flash_extra": e["flash_extra"]}).ok
    e = expected(7)
    assert not check(7, {**e, "naive": e["naive"] + 1}).ok  # counts are exact


# --- junk: "not yet" with a hint, never an exception ----------------------------------------------


class Weird:
    def __len__(self):
        raise RuntimeError("no length")

    def __getitem__(self, i):
        raise RuntimeError("no items")


JUNK = [
    None,
    "abc",
    "False",
    "8",
    "",
    float("nan"),
    float("inf"),
    -float("inf"),
    [],
    {},
    (),
    (1,),
    (1, 2, 3, 4),
    True,
    False,
    np.bool_(True),
    object(),
    Weird(),
    np.array(5.0),
    np.array([np.nan]),
    {"a": 1},
    10**400,
    complex(1, 1),
    b"8",
    {1, 2},
    [[None]],
]

NESTED = [
    (1, {"steps": [(2, "1"), (2, 1.3679), (4, 1.1851)], "softmax": [0.1142, 0.0420, 0.8438]}),
    (1, {"steps": [(2, 1), (2, 1.3679)], "softmax": [0.1142, 0.0420, 0.8438]}),
    (1, {"steps": [(2, 1, 0), (2, 1.3679), (4, 1.1851)], "softmax": [0.1142, 0.0420, 0.8438]}),
    (1, {"steps": [2, 2, 4], "softmax": [0.1142, 0.0420, 0.8438]}),
    (1, {"steps": WORKED[1]["steps"], "softmax": [0.1142, float("nan"), 0.8438]}),
    (1, {"steps": WORKED[1]["steps"], "softmax": {0.1142, 0.0420, 0.8438}}),
    (1, {"steps": WORKED[1]["steps"]}),
    (1, (WORKED[1]["steps"], WORKED[1]["softmax"])),
    (2, {"S": "68.7e9", "flash_extra": 8 * 2**20}),
    (2, {"S": 68.7e9, "flash_extra": None}),
    (2, {"S": 68.7e9, "flash_extra": 8 * 2**20, "P": 1}),
    (2, {"s": 68.7e9, "flash_extra": 8 * 2**20}),
    (4, (7.99, 126, 0.427)),
    (4, {"a": [7.99], "b": 126, "of_ridge": 0.427}),
    (5, {"a", 1}),
    (5, {"a", "z"}),
    (5, "acd"),
    (5, set()),
    (5, [["a"]]),
    (7, {"naive": [8400], "cascade": 1400, "saving": 0.833}),
    (7, {"naive": 8400.5, "cascade": 1400, "saving": 0.833}),
    (8, {"a": True}),
    (9, {"block_size": [1, "1"], "kv_blocks": 10, "partial": 3}),
    (9, {"block_size": (1, 1, 1), "kv_blocks": 10, "partial": 3}),
    (9, {"block_size": 1, "kv_blocks": float("nan"), "partial": 3}),
]


@pytest.mark.parametrize("n", range(1, 10))
@pytest.mark.parametrize("junk", JUNK, ids=lambda j: type(j).__name__ + ":" + repr(j)[:12])
def test_junk_is_not_yet_and_never_raises(n, junk):
    r = check(n, junk)
    assert r.ok is False and r.hint.strip() and "\n" not in str(r)


@pytest.mark.parametrize("n,answer", NESTED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(NESTED)])
def test_nested_wrong_types_are_not_yet(n, answer):
    r = check(n, answer)
    assert r.ok is False and r.hint.strip()


# --- n itself is checked by raising, by name ------------------------------------------------------


@pytest.mark.parametrize("n", [0, 10, -1, 100])
def test_n_out_of_range(n):
    with pytest.raises(ValueError, match=rf"\bn={n}\b.*1 <= n <= 9"):
        check(n, 1)
    with pytest.raises(ValueError, match=r"\bn\b"):
        expected(n)


@pytest.mark.parametrize("n", [True, False, 3.0, "3", None, np.float64(3)])
def test_n_of_wrong_type(n):
    with pytest.raises(TypeError, match=r"\bn must be an integer.*1 <= n <= 9"):
        check(n, 1)


def test_n_may_be_a_numpy_integer():
    assert check(np.int64(6), 8).ok and check(np.int64(6), 8).n == 6


# --- the result and the options --------------------------------------------------------------------


def test_result_is_frozen_and_one_line():
    r = check(3, 9_355_264)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.ok = False
    assert repr(r) == str(r) and r.n == 3 and isinstance(r.ok, bool) and isinstance(r.hint, str)


def test_choices():
    for n in (5, 8):
        text = exercises.choices(n)
        lines = [line for line in text.splitlines() if not line.startswith("    ")]
        assert [line[:3] for line in lines] == [f"({k})" for k in exercises.CHOICES[n]]
        assert max(len(line) for line in text.splitlines()) <= 100
        assert " ".join(text.split()) == " ".join(f"({k}) {v}" for k, v in exercises.CHOICES[n].items())
    with pytest.raises(ValueError, match=r"\bn=3\b"):
        exercises.choices(3)
    with pytest.raises(ValueError, match=r"\bn=0\b"):
        exercises.choices(0)


# --- None is "not answered yet", with the form --------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 10))
def test_none_is_not_answered_yet_with_the_form(n):
    r = check(n, None)
    assert r.ok is False and r.answered is False
    assert str(r) == f"exercise {n}: unanswered — write {FORMS[n]}" and len(str(r)) <= 100
    assert check(n, WORKED[n]).answered and check(n, "abc").answered


def _answer_and_check_cells():
    """(n, the answer cell, the check cell) for each exercise, in notebook order."""
    code = [c for c in CELLS if c["cell_type"] == "code"]
    out = []
    for i, c in enumerate(code):
        m = re.fullmatch(r"exercises\.check\((\d), answer\)", _text(c).strip())
        if m:
            out.append((int(m.group(1)), code[i - 1], c))
    return out


def test_notebook_answer_cells_start_empty():
    cells = _answer_and_check_cells()
    assert [n for n, _, _ in cells] == list(range(1, 10))
    for n, answer, checked in cells:
        assert _text(answer) == f"answer = None  # {FORMS[n]}"
        shown = "".join("".join(o["data"]["text/plain"]) for o in checked["outputs"])
        assert shown == str(check(n, None)), (n, shown)
    outputs = json.dumps([c.get("outputs", []) for c in CELLS])
    assert "right —" not in outputs


def test_notebook_names_no_other_lecture():
    text = "\n".join(_text(c) for c in CELLS)
    assert not re.search(r"\blecture \d+", text, re.I), re.findall(r".{30}\blecture \d+.{20}", text, re.I)


# --- the notebook's worked answers: their library snippets run and print what they say -------------


def _snippets():
    text = [_text(c) for c in CELLS if c["cell_type"] == "markdown"]
    return [b for t in text for b in re.findall(r"```python\n(.*?)```", t, re.S)]


def _plain(x):
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def test_notebook_snippets_run_and_match_their_comments():
    blocks = _snippets()
    assert len(blocks) == 7  # exercises 1-4, 6, 7 and 9 show library calls
    compared = 0
    for block in blocks:
        ns: dict = {}
        for line in block.splitlines():
            code, _, comment = line.partition("  #")
            if not code.strip() or code.startswith("#"):
                continue
            try:
                compile(code, "<snippet>", "eval")
            except SyntaxError:  # an import or an assignment
                exec(code, ns)
                continue
            value = eval(code, ns)
            try:
                said = ast.literal_eval(comment.strip())
            except (ValueError, SyntaxError):  # "(7.992..., 126.03...)", a Counter, no comment
                continue
            assert _plain(value) == _plain(said), (line, value)
            compared += 1
    assert compared >= 9  # the absorbed-MLA lines of exercise 4 included
