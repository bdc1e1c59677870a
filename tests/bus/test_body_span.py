"""Finding the body in an envelope's bytes fed in arbitrary chunks: the span is the top-level
``body`` value whatever the chunks' cuts, the strings' escapes and braces, and the nested keys
named ``body``; a second top-level ``body`` is flagged."""

from __future__ import annotations

import json
import random
from typing import Any

from shared.bus.body_span import BodySpan

TRICKY = ['a"b\\c,}{', "body", "ü€\n", 1, 2.5, None, True, [], {}]


def nested(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice(TRICKY)
    if roll < 0.6:
        return [nested(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["body", "x", 'b"ody', "y,z", "body\\"]
    return {rng.choice(keys): nested(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def span_of(data: bytes, cuts: list[int]) -> BodySpan:
    span, previous = BodySpan(), 0
    for cut in [*cuts, len(data)]:
        span.feed(data[previous:cut])
        previous = cut
    return span


def test_the_span_is_the_top_level_body_however_the_bytes_are_cut() -> None:
    rng = random.Random(42)
    for _ in range(2000):
        body = {"k": nested(rng, 1), "body": nested(rng, 1)}
        fields = {"id": 'm"1', "headers": {"body": "{"}, "body": body, "z": [1, {"body": 2}]}
        order = list(fields)
        rng.shuffle(order)
        data = json.dumps(
            {key: fields[key] for key in order},
            ensure_ascii=rng.random() < 0.5,
            separators=rng.choice([(",", ":"), (", ", ": ")]),
        ).encode("utf-8")
        cuts = sorted(rng.sample(range(len(data) + 1), min(6, len(data) + 1)))

        span = span_of(data, cuts)

        assert span.start is not None, data
        assert span.end is not None, data
        assert json.loads(data[span.start : span.end]) == body, data
        assert span.opens == ord("{")
        assert not span.twice


def test_a_second_body_or_none_is_told() -> None:
    assert span_of(b'{"body":{},"x":1,"body":{"a":1}}', [3, 12]).twice
    absent = span_of(b'{"id":"body","payload":{"body":1}}', [5])
    assert (absent.start, absent.end) == (None, None)
    null = span_of(b'{"body": null, "payload": {}}', [])
    assert null.opens == ord("n")
