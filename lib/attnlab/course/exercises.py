"""The lecture's nine exercises (§9), checked: `check(n, answer)` says right or not yet, in one line.

    >>> from attnlab.course import exercises
    >>> print(exercises.check(6, None))
    exercise 6: unanswered — write one whole number, the split count
    >>> print(exercises.check(6, 3))
    exercise 6: not yet — hint: choose one of the split counts the exercise offers (1, 2, 4, ... 64)
    >>> exercises.check(3, 9_355_264).ok, exercises.check(3, 9.4e6).ok
    (True, False)

Every number a check accepts is computed from the library when it checks (`expected(n)` shows
them, for instructors and tests), within the relative tolerance in `TOLERANCE` or the absolute one
in `TOLERANCE_ABS`, whichever is larger (exact where the answer is a count). A wrong answer gets a
hint that points at the idea, never at the number. An answer of the wrong form (a string, NaN, a
list of the wrong length, a missing key) is "not yet" with a hint about the form, never an
exception; `None`, the notebook's empty answer, is "unanswered" with the form to write in its place (`FORMS`).
Only `n` itself is checked by raising.

Reading an answer (its form, and how near it is to a known mistake) is `attnlab.course.answers`.

This module is long because it holds nine exercises: each one's expected values, the form of its
answer, its hints and, for the two multiple-choice exercises, the options; split further, an
exercise's checker would sit apart from the numbers and hints it checks against.
"""

from __future__ import annotations

import numbers
import textwrap
from dataclasses import dataclass

from attnlab.core import decode, iomodel, softmax
from attnlab.machine import hardware, models
from attnlab.core.mla import mla_intensity
from attnlab.core.variants import sink_window, tile_mask
from attnlab.course.answers import NotYet, integer, letters, near, number, parts, rounded_off, sequence

__all__ = [
    "check",
    "Check",
    "expected",
    "accepted_6",
    "choices",
    "TOLERANCE",
    "TOLERANCE_ABS",
    "FORMS",
    "CHOICES",
]

#: Relative tolerance of each exercise's numbers (0: exact; counts, split counts, option sets).
TOLERANCE = {1: 0.01, 2: 0.02, 3: 0, 4: 0.01, 5: 0, 6: 0, 7: 0.01, 8: 0, 9: 0}
#: Absolute tolerance, where it is larger than the relative one: exercise 1's numbers may be
#: written to two decimals (a softmax of 0.042 as 0.04 is rounding, not a wrong method).
TOLERANCE_ABS = {1: 0.005}

#: The form of each exercise's answer, as the notebook's empty answer cells show it.
FORMS = {
    1: '{"steps": [(m1, l1), (m2, l2), (m3, l3)], "softmax": [p1, p2, p3]}',
    2: '{"S": bytes, "flash_extra": bytes}',
    3: "one whole number, the count of elements",
    4: '{"a": FLOP/byte, "b": FLOP/byte, "of_ridge": fraction}',
    5: 'the set of letters of the true statements, e.g. {"a", "b"}',
    6: "one whole number, the split count",
    7: '{"naive": tokens, "cascade": tokens, "saving": fraction}',
    8: 'the set of letters of the true statements, e.g. {"a", "b"}',
    9: '{"block_size": tokens, "kv_blocks": count, "partial": count}',
}

#: Options of the multiple-choice exercises: letter -> statement; `choices(n)` prints them.
CHOICES = {
    5: {
        "a": "Inference runs only the forward pass: no gradients, so nothing ever needs S or P again.",
        "b": "At inference the blocks are small enough that S fits in SRAM, so it is simply kept there.",
        "c": "At the end of the forward pass the output O is what must be kept.",
        "d": "When attention is cut into parts (split-KV, cascade, chunked prefill), each part also keeps "
        "its LSE, so the parts can be merged exactly with ⊕.",
        "e": "Inference writes P to HBM so that the next decode step can reuse it.",
        "f": "Recomputing S would change the result, so inference avoids it.",
    },
    8: {
        "a": "The exponentials of softmax run on the special function units, not on the Tensor Cores.",
        "b": "Blackwell's HBM bandwidth fell, so softmax, which is memory-bound, got slower.",
        "c": "The matrix multiplications got about twice as fast while the exponential units did not, so "
        "the exponentials per score move from a hidden cost onto the critical path.",
        "d": "In roofline terms there is a third roof: a ceiling set by the exponential units' throughput.",
        "e": "Blackwell has no exponential instruction at all, so it must be emulated in software.",
        "f": "Fix one: compute part of the exponentials as a polynomial on the ordinary FMA units, so "
        "two kinds of hardware share the work.",
        "g": "Fix two: rescale the running output only when the maximum has grown enough, which cuts "
        "non-matmul work.",
        "h": "Fix: skip the exponential altogether, since softmax is unchanged without it.",
    },
}
_RIGHT_CHOICES = {5: frozenset("acd"), 8: frozenset("acdfg")}
#: The parts of each multiple-choice question and the options that answer them: a set that is
#: right but incomplete gets told which part it leaves short, never which option is missing.
_PARTS = {
    5: (
        ("why inference needs no recomputation", "a"),
        ("what FlashAttention must still keep at inference", "cd"),
    ),
    8: (
        ("why softmax becomes the bottleneck on Blackwell", "acd"),
        ("what FlashAttention-4's two countermeasures do", "fg"),
    ),
}
_CHOICE_HINTS = {
    5: {
        "a": "what does training use S and P for that inference never computes?",
        "b": "the block size is not the reason: FlashAttention never keeps S beyond one tile, in "
        "training or inference",
        "c": "what does the caller actually receive from the attention layer?",
        "d": "a partial result over some of the keys: what must it carry to be merged exactly with another?",
        "e": "P belongs to one query's scores of one step; the next step has a new query",
        "f": "recomputation is exact (the same S from the same Q and K); it is skipped because it is "
        "not needed, not because it is wrong",
    },
    8: {
        "a": "where does an exponential run on the chip, and where does a matrix product?",
        "b": "look at what changed on Blackwell: compute throughput, not bandwidth",
        "c": "what happens to a fixed cost per score when everything around it gets faster?",
        "d": "a roofline has one roof per resource that can run out; which resource is new here?",
        "e": "the instruction is there; the question is its throughput next to the Tensor Cores'",
        "f": "FlashAttention-4 spreads the exponentials over more than one kind of unit: which?",
        "g": "the rescaling of the output by e^(m_old - m_new): is it needed at every step?",
        "h": "softmax is defined by its exponentials; FlashAttention stays exact",
    },
}

_X1 = (2.0, 1.0, 4.0)  # exercise 1's scores
_GIVEN3 = 9.4e6  # the rounded count exercise 3's prompt gives to compare with
_N2 = 32768  # exercise 2's prefill length
_SINKS, _WINDOW, _N9, _BLOCK9 = 4, 1024, 4096, 128  # exercise 9(b)


@dataclass(frozen=True)
class Check:
    """The result of `check`: `ok`, and a `hint` (for a right answer, a line confirming it);
    `answered` is False for the empty answer None. Shown as one line: "exercise 3: right — ...",
    "exercise 3: not yet — hint: ..." or "exercise 3: unanswered — write <the form>" (in place
    of None)."""

    n: int
    ok: bool
    hint: str
    answered: bool = True

    def __str__(self) -> str:
        if not self.answered:
            return f"exercise {self.n}: unanswered — {self.hint}"
        return (
            f"exercise {self.n}: right — {self.hint}"
            if self.ok
            else f"exercise {self.n}: not yet — hint: {self.hint}"
        )

    __repr__ = __str__


def _close(value: float, right: float, n: int) -> bool:
    """Within TOLERANCE[n] of the right value, relative to the right value, or within
    TOLERANCE_ABS[n] of it, whichever is larger."""
    return abs(value - right) <= max(TOLERANCE[n] * abs(right), TOLERANCE_ABS.get(n, 0))


def _units(value: float, right: float, n: int, unit: str) -> str | None:
    """A hint when `value` is the right amount in another unit (GB, GiB, MB, ...), or converted
    with a decimal prefix where a binary one was meant (8 MiB written as 8e6)."""
    for k in (1, 2, 3):
        if _close(value * 2 ** (10 * k) / 10 ** (3 * k), right, n):
            return f"close: mind the prefix, a {'KMG'[k - 1]}iB is 2^{10 * k} bytes, a {'kMG'[k - 1]}B 10^{3 * k}"
        for scale in (10 ** (3 * k), 2 ** (10 * k)):
            if _close(value * scale, right, n) or _close(value / scale, right, n):
                return f"that looks like the right size in another unit; give it in {unit}"
    return None


# --- the nine exercises: expected values (from the library, at check time) and checkers --------------


def _expected_1() -> dict:
    steps = softmax.online_softmax_trace(_X1, chunk=1)
    return {"steps": [(s.m, s.l) for s in steps], "softmax": softmax.online_softmax(_X1, chunk=1).tolist()}


def _check_1(answer) -> str:
    right = _expected_1()
    a = parts(answer, ("steps", "softmax"))
    steps = sequence(a["steps"], len(_X1), "'steps' (one (m, l) pair per number of x)")
    for i, (pair, (m, l)) in enumerate(zip(steps, right["steps"]), 1):
        mi, li = (
            number(v, f"step {i}'s {w}") for v, w in zip(sequence(pair, 2, f"step {i} (a pair (m, l))"), "ml")
        )
        if not _close(mi, m, 1):
            raise NotYet(f"step {i}'s m: m is the largest value seen so far")
        if not _close(li, l, 1):
            if rounded_off(li, l):
                raise NotYet(
                    f"step {i}'s l: the method is right, the difference is rounding; keep two decimals"
                )
            raise NotYet(
                f"step {i}'s l: l is the sum of e^(x - m) over the values seen so far; when m "
                "grows, the old sum is first multiplied by e^(m_old - m_new)"
                if i > 1
                else "step 1's l: one value, measured against itself"
            )
    probs = [number(v, f"softmax[{i}]") for i, v in enumerate(sequence(a["softmax"], len(_X1), "'softmax'"))]
    if not all(_close(p, r, 1) for p, r in zip(probs, right["softmax"])):
        if all(rounded_off(p, r) for p, r in zip(probs, right["softmax"])):
            raise NotYet("'softmax': the method is right, the difference is rounding; keep two decimals")
        raise NotYet("the final softmax is e^(x_i - m) / l with the last step's m and l")
    return f"l = {right['steps'][-1][1]:.4f}, softmax = [{', '.join(f'{p:.4f}' for p in right['softmax'])}]"


def _expected_2() -> dict:
    m = models.get_model("Llama-3-8B")
    cost = models.prefill_cost(m, "H100-SXM", _N2, dtype="fp16")
    return {
        "S": cost.s_bytes_per_layer,  # q_heads * N^2 * 2 bytes
        "flash_extra": m.q_heads * _N2 * 2 * hardware.DTYPE_BYTES["fp32"],
    }  # m and l, fp32


def _check_2(answer) -> str:
    right = _expected_2()
    a = parts(answer, ("S", "flash_extra"))
    heads = models.get_model("Llama-3-8B").q_heads
    for key, idea in (
        ("S", "one N x N matrix per head, 2 bytes per FP16 entry, for every head of the layer"),
        ("flash_extra", "two FP32 numbers (m and l) per query row, for every head"),
    ):
        v = number(a[key], repr(key))
        if not _close(v, right[key], 2):
            if _close(v * heads, right[key], 2):
                raise NotYet(f"{key!r}: that is one head; the question asks for all heads of the layer")
            raise NotYet(f"{key!r}: " + (_units(v, right[key], 2, "bytes") or idea))
    return (
        f"S is {right['S'] / 1e9:.1f} GB per layer (twice that with P); FlashAttention's m and l "
        f"take {right['flash_extra'] / 2**20:.0f} MiB"
    )


def _expected_3() -> int:
    return iomodel.flash_io(4096, 64, 100_000, "fa1")


def _check_3(answer) -> str:
    right, v = _expected_3(), number(answer, "the answer")
    if v != right:
        if near(v, _GIVEN3) and abs(v - _GIVEN3) < abs(v - right):  # the table's 9.4 M, or about it
            raise NotYet(
                "9.4 M is the rounded figure the question gives to compare with; the exercise "
                "asks for your own count, to the element"
            )
        if near(v, right):
            raise NotYet(
                "close, but a count is exact: add up every read and write to the element, without rounding"
            )
        if near(v, iomodel.standard_io(4096, 64)):
            raise NotYet(
                "that is standard attention's count (S and P go through HBM); FA1 keeps them on chip"
            )
        if near(v, iomodel.flash_io(4096, 64, 100_000, "fa2")):
            raise NotYet("that is FA2's loop order (Q outside); the exercise asks for FA1: K and V outside")
        n, d = 4096, 64
        kv, per_row = 2 * n * d, 3 * d + 2 * 2  # Q, O read, O written; l, m both
        passes = -(-n // -(-100_000 // (4 * d)))
        if v == kv + passes * n * 3 * d:
            raise NotYet(
                "the passes are counted right, but l and m are missing: every pass also reads "
                "each query row's running max m and sum l and writes them back"
            )
        if v == passes * n * per_row:
            raise NotYet(
                "the passes are counted right, but K and V are missing: each is read once, "
                "block by block, in the outer loop"
            )
        if v > kv and (v - kv) % (n * per_row) == 0:
            raise NotYet(
                "what moves per pass is right, but not the number of passes: there is one per "
                "K/V block, T_c = ceil(N / B_c), with B_c from the block-size rule"
            )
        raise NotYet(
            "count the outer loop over K/V blocks: K and V read once, then per pass every "
            "query row's Q, O, l and m read and O, l, m written"
        )
    return f"{right:,} elements, {iomodel.standard_io(4096, 64) / right:.1f}x fewer than standard attention"


def _expected_4() -> dict:
    l_kv = 8192
    gqa = decode.intensity(models.get_model("Llama-3-70B").group, 1, l_kv)
    mla = decode.intensity(128, 1, l_kv)  # the lecture's rough MLA: GQA with g = 128
    return {"a": gqa, "b": mla, "of_ridge": mla / hardware.ridge_point("H100-SXM", "bf16")}


def _check_4(answer) -> str:
    right = _expected_4()
    a = parts(answer, ("a", "b", "of_ridge"))
    for key in ("a", "b"):
        v = number(a[key], repr(key))
        if not _close(v, right[key], 4):
            g = 8 if key == "a" else 128
            raise NotYet(
                f"{key!r}: use I = g l_kv / (g + l_kv) with g = {g}"
                + (
                    "; at this g the context is no longer much larger than g, so I is not just g"
                    if abs(v - g) <= TOLERANCE[4] * g
                    else ""
                )
            )
    v = number(a["of_ridge"], "'of_ridge'")
    if not _close(v, right["of_ridge"], 4):
        raise NotYet(
            "'of_ridge' is the MLA intensity divided by the H100's bf16 ridge point "
            "(peak FLOP/s over bandwidth), a fraction" + (" between 0 and 1" if v > 1 else "")
        )
    absorbed, ridge = mla_intensity("absorbed", 8192), hardware.ridge_point("H100-SXM", "bf16")
    verdict = "still below" if absorbed < ridge else "above"
    return (
        f"(a) {right['a']:.2f}, (b) {right['b']:.1f} FLOP/byte, {right['of_ridge']:.0%} of the ridge: "
        f"memory-bound; the absorbed form MLA kernels run reaches {absorbed:.1f}, {verdict} the "
        f"H100's {ridge:.0f}"
    )


def _check_choices(n: int, answer) -> str:
    chosen, right = letters(answer, CHOICES[n]), _RIGHT_CHOICES[n]
    wrong, missing = sorted(chosen - right), sorted(right - chosen)
    if wrong:
        raise NotYet(f"reconsider ({wrong[0]}): {_CHOICE_HINTS[n][wrong[0]]}")
    if missing:  # what the chosen set leaves unanswered, not which option
        for part, letters_of in _PARTS[n]:
            gap = right & frozenset(letters_of) - chosen
            if gap:
                k = len(gap)
                raise NotYet(
                    f"every statement you chose is true, but the set is incomplete: {k} more "
                    f"true statement{'s are' if k > 1 else ' is'} about {part}"
                )
    return "that is the whole set"


def _expected_6() -> int:
    return hardware.best_split(2, 16384, 8, "H100-SXM")[0]


def accepted_6() -> list[int]:
    """The split counts exercise 6 accepts: every one whose modelled time lies within the model's
    error of the fastest (`hardware.SPLIT_MARGIN`, the 1 % notebook 04's rule uses): past one full
    wave the model's times are flat, and a 0.4 % difference is not one it can promise."""
    _, runs = hardware.best_split(2, 16384, 8, "H100-SXM")
    fastest = min(r.time for r in runs)
    return [r.splits for r in runs if r.time <= fastest * (1 + hardware.SPLIT_MARGIN)]


def _check_6(answer) -> str:
    right = _expected_6()
    v = integer(answer, "the split count")
    if v not in hardware.SPLITS:
        raise NotYet("choose one of the split counts the exercise offers (1, 2, 4, ... 64)")
    if v != right and v in accepted_6():
        run, best = (hardware.decode_time(2, 16384, 8, s, "H100-SXM") for s in (v, right))
        return (
            f"within the model's error: {v} splits make {run.blocks} blocks in {run.waves} waves, "
            f"{run.time / best.time - 1:.1%} slower in the model than {right} splits' one full wave, "
            f"a difference it cannot promise; {right} is the fewest splits that fill the SMs"
        )
    if v != right:
        run = hardware.decode_time(2, 16384, 8, v, "H100-SXM")
        sms = hardware.get_gpu("H100-SXM").sms
        if v < right:
            raise NotYet(
                f"{v} split{'s make' if v > 1 else ' makes'} {run.blocks} work blocks for {sms} SMs: "
                f"most SMs sit idle"
            )
        raise NotYet(
            f"{v} splits make {run.blocks} blocks, more than one wave of {sms} SMs: the attention "
            f"time stops falling once one wave is full, and the merge grows with every split"
        )
    run = hardware.decode_time(2, 16384, 8, right, "H100-SXM")
    return f"{run.blocks} blocks fill one wave at {run.utilization:.0%}; {run.time * 1e6:.1f} µs"


def _expected_7() -> dict:
    c = decode.cascade_intensity(8, 1000, 50)
    return {"naive": c["tokens_naive"], "cascade": c["tokens_cascade"], "saving": c["saving"]}


def _check_7(answer) -> str:
    right = _expected_7()
    a = parts(answer, ("naive", "cascade", "saving"))
    if integer(a["naive"], "'naive'") != right["naive"]:
        raise NotYet(
            "'naive': without cascade every request reads its own copy of the prefix plus its own tokens"
        )
    if integer(a["cascade"], "'cascade'") != right["cascade"]:
        raise NotYet(
            "'cascade': the shared prefix is read once for all requests, each request's own tokens once"
        )
    v = number(a["saving"], "'saving'")
    if not _close(v, right["saving"], 7):
        raise NotYet(
            "'saving' is 1 - cascade / naive, a fraction"
            + (" between 0 and 1 (50 % is 0.5)" if v > 1 else "")
        )
    return f"{right['naive']:,} against {right['cascade']:,} tokens: {right['saving']:.0%} fewer KV reads"


def _expected_9() -> dict:
    kinds = tile_mask([sink_window(_SINKS, _WINDOW)], _N9, _N9, _BLOCK9, _BLOCK9)[-1]
    return {
        "block_size": 1,  # SGLang's radix tree pages hold one token: (1, 1) blocks
        "kv_blocks": int((kinds != "empty").sum()),
        "partial": int((kinds == "partial").sum()),
    }


def _check_9(answer) -> str:
    right = _expected_9()
    a = parts(answer, ("block_size", "kv_blocks", "partial"))
    size = a["block_size"]
    if isinstance(size, (tuple, list)):  # (rows, columns) of a block is fine too
        size = tuple(integer(s, "'block_size'") for s in sequence(size, 2, "'block_size' (rows, columns)"))
        ok = size == (right["block_size"],) * 2
    else:
        ok = integer(size, "'block_size'") == right["block_size"]
    if not ok:
        raise NotYet("'block_size': how many tokens does one page of SGLang's radix tree hold?")
    if integer(a["kv_blocks"], "'kv_blocks'") != right["kv_blocks"]:
        raise NotYet(
            "'kv_blocks': list the key blocks holding the sink tokens, then those the window of "
            "the tile's first and last query reach, the diagonal block included"
        )
    if integer(a["partial"], "'partial'") != right["partial"]:
        raise NotYet(
            "'partial': a block is partial when some of its (query, key) pairs are masked out; "
            "look at the sinks' block and both ends of the window"
        )
    return (
        f"blocks of one token; {right['kv_blocks']} KV blocks per query tile, {right['partial']} of "
        f"them partial, whatever the context length"
    )


_CHECKS = {
    1: _check_1,
    2: _check_2,
    3: _check_3,
    4: _check_4,
    5: lambda a: _check_choices(5, a),
    6: _check_6,
    7: _check_7,
    8: lambda a: _check_choices(8, a),
    9: _check_9,
}
_EXPECTED = {
    1: _expected_1,
    2: _expected_2,
    3: _expected_3,
    4: _expected_4,
    5: lambda: set(_RIGHT_CHOICES[5]),
    6: _expected_6,
    7: _expected_7,
    8: lambda: set(_RIGHT_CHOICES[8]),
    9: _expected_9,
}


def _exercise(n) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(
            f"n must be an integer exercise number, got {n!r} ({type(n).__name__}); valid: 1 <= n <= 9"
        )
    if not 1 <= int(n) <= 9:
        raise ValueError(f"n={int(n)} is out of range; valid: 1 <= n <= 9")
    return int(n)


def check(n: int, answer) -> Check:
    """Check `answer` to exercise `n` (1..9); the notebook's prompts say each answer's form.

    Never raises for the answer: a wrong or unreadable one is `ok=False` with a hint; None (the
    notebook's empty answer) is `ok=False, answered=False` with the form `FORMS[n]`. Raises
    TypeError / ValueError naming n when n is not an integer from 1 to 9.
    """
    n = _exercise(n)
    if answer is None:
        return Check(n, False, f"write {FORMS[n]}", answered=False)  # in place of None; fits 100
    try:
        return Check(n, True, _CHECKS[n](answer))
    except NotYet as e:
        return Check(n, False, str(e))
    except Exception as e:  # an answer object that breaks len(), iteration, float(), ...
        return Check(
            n, False, f"could not read that answer ({type(e).__name__}); see the form the exercise asks for"
        )


def expected(n: int):
    """The values exercise n accepts, computed from the library now (for instructors and tests)."""
    return _EXPECTED[_exercise(n)]()


def choices(n: int) -> str:
    """The options of multiple-choice exercise n (5 or 8), one per paragraph of at most 100
    characters a line, the lines after an option's first indented under its text."""
    n = _exercise(n)
    if n not in CHOICES:
        raise ValueError(f"n={n} has no options; valid: {', '.join(map(str, CHOICES))}")
    return "\n".join(
        textwrap.fill(f"({k}) {v}", 100, subsequent_indent="    ", break_on_hyphens=False)
        for k, v in CHOICES[n].items()
    )
