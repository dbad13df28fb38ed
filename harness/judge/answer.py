"""The judge's answer: one JSON object naming a rubric class and why, checked before it is kept."""

import json
import re

from pydantic import BaseModel, ConfigDict

from harness.judge.rubric import Rubric


class Answer(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str
    reason: str


def answer_format(rubric: Rubric) -> str:
    return '{"label": "<one of: ' + ", ".join(rubric.names) + '>", "reason": "<one sentence>"}'


def _canonical(label: str) -> str:
    return re.sub(r"[\s-]+", "_", label.strip().lower())


def parse_answer(text: str, rubric: Rubric) -> Answer:
    """The answer in ``text`` (its first JSON object with a label, fenced or not); ValueError saying
    what is wrong with it otherwise."""
    decoder = json.JSONDecoder()
    objects: list[dict[str, object]] = []
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            objects.append(value)
            if "label" in value:
                break
    if not objects:
        raise ValueError("it holds no JSON object")
    found = objects[-1]
    label, reason = found.get("label"), found.get("reason", "")
    if not isinstance(label, str):
        raise ValueError('its JSON object has no "label" string')
    if not isinstance(reason, str):
        raise ValueError('its "reason" is not a string')
    names = {_canonical(n): n for n in rubric.names}
    if _canonical(label) not in names:
        raise ValueError(f"label {label!r} is not one of {', '.join(rubric.names)}")
    return Answer(label=names[_canonical(label)], reason=" ".join(reason.split())[:500])
