"""The small task sets shipped in `rlvr/tasks/data/` for the file kits (`gsm8k:builtin`,
`math:builtin`, `code:builtin`, `structured:builtin`), so every config runs offline.

    python -m rlvr.tasks.builtin        # rewrites the four files from this module

  * gsm8k_builtin.jsonl: GSM8K-format records {"question", "answer" ending "#### N", "split"}
    from reasoning-gym's `gsm_symbolic` generator (grade-school word problems with worked
    rationales), 120 train + 40 eval, split by question text (rlvr.tasks.splits).
  * math_builtin.jsonl: MATH-format records {"problem", "solution" ending in \\boxed{}, "split",
    "type"} from reasoning-gym's basic_arithmetic, simple_equations, fraction_simplification,
    lcm and gcd generators, with a one-line worked solution, 24 train + 8 eval each.
  * code_builtin.jsonl: 32 Python function tasks written here (docs/architecture.md §3 records, task_type "code"),
    each with 2 public and 4 hidden tests; 24 train, 8 eval. `CODE_TASKS` keeps a reference
    solution per task (tests check that it passes in the sandbox; never shipped to the policy).
  * structured_builtin.jsonl: 32 JSON-extraction tasks (task_type "structured") from three
    templates, with a JSON Schema, the expected object and cross-field constraints; 24 train,
    8 eval.
Every file is deterministic: a test regenerates them and compares.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from rlvr.records.task import TaskSpec
from rlvr.tasks import files, splits

GSM8K_COUNTS = {"train": 120, "eval": 40}
MATH_GENERATORS = {
    "basic_arithmetic": dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2),
    "simple_equations": {},
    "fraction_simplification": {},
    "lcm": {},
    "gcd": {},
}
MATH_COUNTS = {"train": 24, "eval": 8}
CODE_PROMPT = ("Write a Python function `{sig}` that {desc}\n"
               "Reply with the complete function in a ```python code block.")

# (entry point, signature, description, reference solution, [(args, expected)] × 6: 2 public then
# 4 hidden). Tasks 0-23 train, 24-31 eval.
CODE_TASKS = [
    ("add", "add(a, b)", "returns the sum of the integers a and b.",
     "def add(a, b):\n    return a + b\n",
     [([1, 2], 3), ([-4, 4], 0), ([10, 5], 15), ([0, 0], 0), ([-7, -8], -15), ([123, 877], 1000)]),
    ("square", "square(n)", "returns n squared.",
     "def square(n):\n    return n * n\n",
     [([3], 9), ([-2], 4), ([0], 0), ([11], 121), ([-12], 144), ([100], 10000)]),
    ("is_even", "is_even(n)", "returns True if the integer n is even, else False.",
     "def is_even(n):\n    return n % 2 == 0\n",
     [([4], True), ([7], False), ([0], True), ([-3], False), ([-10], True), ([1001], False)]),
    ("maximum", "maximum(xs)", "returns the largest element of the non-empty list xs.",
     "def maximum(xs):\n    return max(xs)\n",
     [([[1, 5, 2]], 5), ([[-3, -1]], -1), ([[7]], 7), ([[0, 0, 0]], 0), ([[4, 9, 9, 1]], 9),
      ([[-5, -9, -2]], -2)]),
    ("reverse_string", "reverse_string(s)", "returns the string s reversed.",
     "def reverse_string(s):\n    return s[::-1]\n",
     [(["abc"], "cba"), ([""], ""), (["a"], "a"), (["hello"], "olleh"), (["racecar"], "racecar"),
      (["ab cd"], "dc ba")]),
    ("count_vowels", "count_vowels(s)", "returns how many characters of s are vowels (a, e, i, "
     "o, u, upper or lower case).",
     "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n",
     [(["hello"], 2), (["xyz"], 0), ([""], 0), (["AEIOU"], 5), (["Programming"], 3),
      (["a e i"], 3)]),
    ("factorial", "factorial(n)", "returns n! for an integer n >= 0.",
     "def factorial(n):\n    out = 1\n    for i in range(2, n + 1):\n        out *= i\n    return out\n",
     [([0], 1), ([5], 120), ([1], 1), ([3], 6), ([10], 3628800), ([12], 479001600)]),
    ("fibonacci", "fibonacci(n)", "returns the n-th Fibonacci number, with fibonacci(0) = 0 "
     "and fibonacci(1) = 1.",
     "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
     [([0], 0), ([7], 13), ([1], 1), ([2], 1), ([10], 55), ([30], 832040)]),
    ("is_palindrome", "is_palindrome(s)", "returns True if the string s reads the same "
     "backwards, else False.",
     "def is_palindrome(s):\n    return s == s[::-1]\n",
     [(["abba"], True), (["abc"], False), ([""], True), (["a"], True), (["abca"], False),
      (["level"], True)]),
    ("sum_list", "sum_list(xs)", "returns the sum of the numbers in the list xs (0 for an "
     "empty list).",
     "def sum_list(xs):\n    return sum(xs)\n",
     [([[1, 2, 3]], 6), ([[]], 0), ([[-1, 1]], 0), ([[10]], 10), ([[5, 5, 5, 5]], 20),
      ([[-3, -4]], -7)]),
    ("count_occurrences", "count_occurrences(xs, x)", "returns how many times x appears in "
     "the list xs.",
     "def count_occurrences(xs, x):\n    return xs.count(x)\n",
     [([[1, 2, 1], 1], 2), ([[], 3], 0), ([[3, 3, 3], 3], 3), ([[1, 2], 5], 0),
      ([["a", "b", "a"], "a"], 2), ([[0, 1, 0, 1], 0], 2)]),
    ("unique_sorted", "unique_sorted(xs)", "returns the distinct elements of the list xs in "
     "increasing order.",
     "def unique_sorted(xs):\n    return sorted(set(xs))\n",
     [([[3, 1, 3]], [1, 3]), ([[]], []), ([[5]], [5]), ([[2, 2, 2]], [2]),
      ([[9, -1, 4, -1]], [-1, 4, 9]), ([[1, 2, 3]], [1, 2, 3])]),
    ("gcd", "gcd(a, b)", "returns the greatest common divisor of the positive integers a and b.",
     "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
     [([12, 18], 6), ([7, 5], 1), ([100, 10], 10), ([9, 9], 9), ([270, 192], 6), ([17, 51], 17)]),
    ("is_prime", "is_prime(n)", "returns True if the integer n is a prime number, else False.",
     "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n"
     "        if n % i == 0:\n            return False\n        i += 1\n    return True\n",
     [([7], True), ([8], False), ([1], False), ([2], True), ([97], True), ([91], False)]),
    ("celsius_to_fahrenheit", "celsius_to_fahrenheit(c)", "converts a temperature from "
     "degrees Celsius to degrees Fahrenheit.",
     "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
     [([0], 32.0), ([100], 212.0), ([-40], -40.0), ([37], 98.6), ([25], 77.0), ([-10], 14.0)]),
    ("word_count", "word_count(s)", "returns the number of whitespace-separated words in s.",
     "def word_count(s):\n    return len(s.split())\n",
     [(["hello world"], 2), ([""], 0), (["one"], 1), (["  a  b   c "], 3), (["x y z w"], 4),
      (["tab\there"], 2)]),
    ("capitalize_words", "capitalize_words(s)", "returns s with the first letter of every "
     "space-separated word upper-cased and the other letters unchanged.",
     "def capitalize_words(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n",
     [(["hello world"], "Hello World"), (["a"], "A"), ([""], ""), (["python is fun"], "Python Is Fun"),
      (["mIxed case"], "MIxed Case"), (["x y"], "X Y")]),
    ("flatten", "flatten(xss)", "returns one list with the elements of the lists in xss, in "
     "order.",
     "def flatten(xss):\n    return [x for xs in xss for x in xs]\n",
     [([[[1], [2, 3]]], [1, 2, 3]), ([[]], []), ([[[], [1]]], [1]), ([[[4, 5], [], [6]]], [4, 5, 6]),
      ([[["a"], ["b"]]], ["a", "b"]), ([[[0, 0]]], [0, 0])]),
    ("second_largest", "second_largest(xs)", "returns the second largest distinct value of "
     "the list xs (which has at least two distinct values).",
     "def second_largest(xs):\n    return sorted(set(xs))[-2]\n",
     [([[1, 3, 2]], 2), ([[5, 5, 4]], 4), ([[-1, -2]], -2), ([[10, 20, 30, 40]], 30),
      ([[7, 7, 7, 1]], 1), ([[0, 100]], 0)]),
    ("digit_sum", "digit_sum(n)", "returns the sum of the decimal digits of the integer n "
     "(ignoring its sign).",
     "def digit_sum(n):\n    return sum(int(d) for d in str(abs(n)))\n",
     [([123], 6), ([0], 0), ([-45], 9), ([9999], 36), ([1000], 1), ([507], 12)]),
    ("binary_string", "binary_string(n)", "returns the binary representation of the integer "
     "n >= 0 as a string without prefix.",
     "def binary_string(n):\n    return bin(n)[2:]\n",
     [([5], "101"), ([0], "0"), ([1], "1"), ([8], "1000"), ([255], "11111111"), ([6], "110")]),
    ("merge_sorted", "merge_sorted(a, b)", "returns the sorted merge of the sorted lists a and b.",
     "def merge_sorted(a, b):\n    return sorted(a + b)\n",
     [([[1, 3], [2]], [1, 2, 3]), ([[], []], []), ([[1], []], [1]), ([[], [4, 5]], [4, 5]),
      ([[1, 1], [1]], [1, 1, 1]), ([[-2, 0], [-1, 3]], [-2, -1, 0, 3])]),
    ("running_sum", "running_sum(xs)", "returns the list of prefix sums of xs.",
     "def running_sum(xs):\n    out, t = [], 0\n    for x in xs:\n        t += x\n        out.append(t)\n"
     "    return out\n",
     [([[1, 2, 3]], [1, 3, 6]), ([[]], []), ([[5]], [5]), ([[1, -1, 1]], [1, 0, 1]),
      ([[0, 0]], [0, 0]), ([[2, 2, 2, 2]], [2, 4, 6, 8])]),
    ("char_frequency", "char_frequency(s)", "returns a dict mapping each character of s to "
     "the number of times it occurs.",
     "def char_frequency(s):\n    out = {}\n    for c in s:\n        out[c] = out.get(c, 0) + 1\n"
     "    return out\n",
     [(["aab"], {"a": 2, "b": 1}), ([""], {}), (["x"], {"x": 1}), (["abc"], {"a": 1, "b": 1, "c": 1}),
      (["zzzz"], {"z": 4}), (["a a"], {"a": 2, " ": 1})]),
    # ---- eval tasks
    ("cube", "cube(n)", "returns n cubed.",
     "def cube(n):\n    return n ** 3\n",
     [([2], 8), ([-3], -27), ([0], 0), ([1], 1), ([10], 1000), ([-1], -1)]),
    ("minimum", "minimum(xs)", "returns the smallest element of the non-empty list xs.",
     "def minimum(xs):\n    return min(xs)\n",
     [([[4, 2, 8]], 2), ([[-1, -5]], -5), ([[3]], 3), ([[0, 1]], 0), ([[9, 9]], 9),
      ([[100, -100, 50]], -100)]),
    ("is_odd", "is_odd(n)", "returns True if the integer n is odd, else False.",
     "def is_odd(n):\n    return n % 2 == 1\n",
     [([3], True), ([4], False), ([0], False), ([-5], True), ([-2], False), ([99], True)]),
    ("product_list", "product_list(xs)", "returns the product of the numbers in the list xs "
     "(1 for an empty list).",
     "def product_list(xs):\n    out = 1\n    for x in xs:\n        out *= x\n    return out\n",
     [([[2, 3]], 6), ([[]], 1), ([[5]], 5), ([[-1, 4]], -4), ([[1, 2, 3, 4]], 24), ([[0, 7]], 0)]),
    ("lcm", "lcm(a, b)", "returns the least common multiple of the positive integers a and b.",
     "def lcm(a, b):\n    x, y = a, b\n    while y:\n        x, y = y, x % y\n    return a * b // x\n",
     [([4, 6], 12), ([3, 5], 15), ([7, 7], 7), ([1, 9], 9), ([12, 18], 36), ([21, 6], 42)]),
    ("remove_duplicates", "remove_duplicates(xs)", "returns xs without repeated elements, "
     "keeping the first occurrence of each in order.",
     "def remove_duplicates(xs):\n    seen, out = set(), []\n    for x in xs:\n"
     "        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out\n",
     [([[1, 2, 1, 3]], [1, 2, 3]), ([[]], []), ([[5, 5]], [5]), ([[3, 2, 1]], [3, 2, 1]),
      ([["a", "b", "a"]], ["a", "b"]), ([[0, 1, 0, 1, 2]], [0, 1, 2])]),
    ("count_words_starting_with", "count_words_starting_with(s, letter)", "returns how many "
     "whitespace-separated words of s start with the given letter (case-sensitive).",
     "def count_words_starting_with(s, letter):\n    return sum(w.startswith(letter) for w in s.split())\n",
     [(["apple avocado banana", "a"], 2), (["", "x"], 0), (["Aa aa", "a"], 1), (["b b b", "b"], 3),
      (["cat dog", "z"], 0), (["tea time today", "t"], 3)]),
    ("vowel_positions", "vowel_positions(s)", "returns the list of indices of the lower-case "
     "vowels (a, e, i, o, u) in s.",
     "def vowel_positions(s):\n    return [i for i, c in enumerate(s) if c in 'aeiou']\n",
     [(["hello"], [1, 4]), ([""], []), (["xyz"], []), (["aei"], [0, 1, 2]), (["bAnana"], [3, 5]),
      (["code"], [1, 3])]),
]
N_CODE_TRAIN = 24

STRUCTURED_COUNTS = {"train": 24, "eval": 8}
_NAMES = ["Ada", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas",
          "Kira", "Liam", "Maya", "Noah", "Olga", "Pablo"]
_ITEMS = ["notebook", "pencil", "mug", "lamp", "backpack", "stapler", "calendar", "charger"]
_EVENTS = ["team meeting", "dentist appointment", "yoga class", "code review", "lunch",
           "budget review", "guitar lesson", "project demo"]
_CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Hanoi", "Austin", "Porto", "Quebec"]


def _order_task(rng, i, split):
    name, item = _NAMES[rng.integers(len(_NAMES))], _ITEMS[rng.integers(len(_ITEMS))]
    qty = int(rng.integers(1, 10))
    price = float(rng.integers(50, 2000)) / 100
    total = round(qty * price, 2)
    text = f"Hi, this is {name}. Please send me {qty} x {item} at {price:.2f} each."
    schema = {"type": "object", "required": ["customer", "item", "quantity", "unit_price", "total"],
              "properties": {"customer": {"type": "string"}, "item": {"type": "string"},
                             "quantity": {"type": "integer", "minimum": 1},
                             "unit_price": {"type": "number"}, "total": {"type": "number"}},
              "additionalProperties": False}
    prompt = ("Extract the order from the message below as a JSON object with the keys "
              "\"customer\" (string), \"item\" (string), \"quantity\" (integer), \"unit_price\" "
              "(number) and \"total\" (number: quantity times unit_price). Reply with the JSON "
              f"object only.\n\nMessage: {text}")
    expected = {"customer": name, "item": item, "quantity": qty, "unit_price": price, "total": total}
    return prompt, {"schema": schema, "expected": expected, "constraints": []}


def _event_task(rng, i, split):
    ev, start = _EVENTS[rng.integers(len(_EVENTS))], int(rng.integers(7, 18))
    length = int(rng.integers(1, 4))
    day = int(rng.integers(1, 29))
    text = f"The {ev} is on March {day}, from {start}:00 for {length} hour{'s' * (length > 1)}."
    schema = {"type": "object", "required": ["title", "day", "start_hour", "end_hour"],
              "properties": {"title": {"type": "string"},
                             "day": {"type": "integer", "minimum": 1, "maximum": 31},
                             "start_hour": {"type": "integer", "minimum": 0, "maximum": 23},
                             "end_hour": {"type": "integer", "minimum": 0, "maximum": 24}},
              "additionalProperties": False}
    prompt = ("Turn the sentence below into a JSON object with the keys \"title\" (string), "
              "\"day\" (integer day of the month), \"start_hour\" and \"end_hour\" (integers, "
              "24-hour clock). Reply with the JSON object only.\n\nSentence: " + text)
    expected = {"title": ev, "day": day, "start_hour": start, "end_hour": start + length}
    return prompt, {"schema": schema, "expected": expected,
                    "constraints": [{"kind": "lt", "left": "start_hour", "right": "end_hour"}]}


def _trip_task(rng, i, split):
    name = _NAMES[rng.integers(len(_NAMES))]
    cities = [str(c) for c in rng.choice(_CITIES, size=int(rng.integers(2, 4)), replace=False)]
    nights = [int(n) for n in rng.integers(1, 5, size=len(cities))]
    legs = ", then ".join(f"{n} night{'s' * (n > 1)} in {c}" for c, n in zip(cities, nights))
    schema = {"type": "object", "required": ["traveller", "stops", "total_nights"],
              "properties": {"traveller": {"type": "string"},
                             "stops": {"type": "array", "minItems": 1, "items": {
                                 "type": "object", "required": ["city", "nights"],
                                 "properties": {"city": {"type": "string"},
                                                "nights": {"type": "integer", "minimum": 1}},
                                 "additionalProperties": False}},
                             "total_nights": {"type": "integer"}},
              "additionalProperties": False}
    prompt = ("Write the trip below as a JSON object with the keys \"traveller\" (string), "
              "\"stops\" (a list of {\"city\": string, \"nights\": integer} in travel order) and "
              "\"total_nights\" (integer, the sum of the nights). Reply with the JSON object "
              f"only.\n\nTrip: {name} spends {legs}.")
    expected = {"traveller": name, "stops": [{"city": c, "nights": n} for c, n in zip(cities, nights)],
                "total_nights": sum(nights)}
    return prompt, {"schema": schema, "expected": expected, "constraints": [
        {"kind": "sum_equals", "items": "stops", "field": "nights", "total": "total_nights"}]}


# ------------------------------------------------------------------------------- builders
def _entries(generator: str, n: int, split: str, **config) -> list[dict]:
    """`n` distinct reasoning-gym entries of `split` (disjoint by question text, seed 0)."""
    import reasoning_gym

    rng = splits.make_rng(0, "builtin", generator, split)

    def stream():
        while True:
            yield from reasoning_gym.create_dataset(generator, size=64,
                                                    seed=int(rng.integers(0, 2**62)), **config)

    it = stream()
    return splits.draw_distinct(n, split, lambda: next(it), key=lambda e: e["question"])


def gsm8k_records() -> list[dict]:
    out = []
    for split, n in GSM8K_COUNTS.items():
        for e in _entries("gsm_symbolic", n, split):
            cot, gold = e["metadata"]["answer_cot"], str(e["answer"]).replace(",", "")
            if float(files.gsm8k_answer(cot)) != float(gold):
                raise AssertionError(f"gsm_symbolic rationale disagrees with its answer: {e}")
            answer = cot.rsplit("####", 1)[0] + f"#### {gold}"  # "#### 28.0" → "#### 28"
            out.append({"question": e["question"], "answer": answer, "split": split})
    return out


def _math_solution(gen: str, e: dict) -> str:
    md, ans = e["metadata"], e["answer"]
    if gen == "basic_arithmetic":
        return f"Evaluating the expression, ${md['expression']} = {ans}$. The answer is $\\boxed{{{ans}}}$."
    if gen == "simple_equations":
        v = md["variable"]
        return (f"Isolating ${v}$ in ${md['equation']}$ gives ${v} = {ans}$. "
                f"The answer is $\\boxed{{{ans}}}$.")
    if gen == "fraction_simplification":
        g = math.gcd(md["numerator"], md["denominator"])
        a, b = md["simplified_numerator"], md["simplified_denominator"]
        return (f"The greatest common divisor of {md['numerator']} and {md['denominator']} is {g}; "
                f"dividing both by it gives $\\boxed{{\\frac{{{a}}}{{{b}}}}}$.")
    nums = ", ".join(map(str, md["numbers"]))
    what = "least common multiple" if gen == "lcm" else "greatest common divisor"
    return f"The {what} of {nums} is {md['result']}. The answer is $\\boxed{{{md['result']}}}$."


def math_records() -> list[dict]:
    out = []
    for gen, cfg in MATH_GENERATORS.items():
        for split, n in MATH_COUNTS.items():
            for e in _entries(gen, n, split, **cfg):
                out.append({"problem": e["question"], "solution": _math_solution(gen, e),
                            "split": split, "type": gen})
    return out


def code_tasks() -> list[TaskSpec]:
    out = []
    for i, (ep, sig, desc, _solution, tests) in enumerate(CODE_TASKS):
        cases = [{"args": args, "expected": exp} for args, exp in tests]
        out.append(TaskSpec(
            task_id=f"code-{ep}", prompt=CODE_PROMPT.format(sig=sig, desc=desc), task_type="code",
            reference_answer={"entry_point": ep, "public_tests": cases[:2],
                              "hidden_tests": cases[2:], "float_tol": 1e-6},
            public_metadata={"split": "train" if i < N_CODE_TRAIN else "eval",
                             "source": "code:builtin"},
            hidden_verifier_id="code_hidden_tests", resource_limits={"time_s": 2, "memory_mb": 256}))
    return out


def code_solutions() -> dict[str, str]:
    """task_id → reference solution (checked by the tests; never shown to the policy)."""
    return {f"code-{ep}": sol for ep, _, _, sol, _ in CODE_TASKS}


def structured_tasks() -> list[TaskSpec]:
    rng = np.random.default_rng(0)
    templates = (_order_task, _event_task, _trip_task)
    out = []
    for split, n in STRUCTURED_COUNTS.items():
        for i in range(n):
            prompt, ref = templates[i % len(templates)](rng, i, split)
            out.append(TaskSpec(task_id=f"structured-{split}-{i:02d}", prompt=prompt,
                                task_type="structured", reference_answer=ref,
                                public_metadata={"split": split, "source": "structured:builtin",
                                                 "template": templates[i % 3].__name__[1:-5]}))
    return out


def expected_files() -> dict[str, str]:
    """file name → its exact text."""
    def jsonl(rows):
        return "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in rows)

    return {files.BUILTIN_FILES["gsm8k"]: jsonl(gsm8k_records()),
            files.BUILTIN_FILES["math"]: jsonl(math_records()),
            files.BUILTIN_FILES["code"]: jsonl(t.to_json() for t in code_tasks()),
            files.BUILTIN_FILES["structured"]: jsonl(t.to_json() for t in structured_tasks())}


def regenerate() -> list[str]:
    written = []
    for name, text in expected_files().items():
        with open(os.path.join(files.DATA_DIR, name), "w", encoding="utf-8") as f:
            f.write(text)
        written.append(name)
    return written


if __name__ == "__main__":
    print(f"wrote {regenerate()} to {files.DATA_DIR}")
