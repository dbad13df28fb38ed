"""How far a judge agrees with human labels: per-class precision and recall, and Cohen's kappa.

Pure logic on (human, judge) label pairs; the labels file is read by ``load_labels``.
"""

import csv
import json
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError


class ClassScore(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str
    support: int  # episodes the humans put in it
    predicted: int  # episodes the judge put in it
    precision: float | None  # None: the judge never chose it
    recall: float | None  # None: the humans never chose it


class Agreement(BaseModel):
    model_config = ConfigDict(frozen=True)

    n: int  # labelled episodes the judge answered
    observed: float  # the share on which they agree
    expected: float  # the share they would agree on by chance, from each side's label frequencies
    kappa: float | None  # Cohen's kappa; None when chance agreement is 1 (both always say one label)
    classes: list[ClassScore]
    not_judged: list[str] = []  # labelled episodes the judge has no answer for (unjudged or not failed)

    def sentence(self) -> str:
        kappa = "undefined (one label only)" if self.kappa is None else f"{self.kappa:.2f}"
        left = f"; {len(self.not_judged)} labelled episode(s) have no judgment" if self.not_judged else ""
        return (
            f"judge vs human labels on {self.n} episodes: {100 * self.observed:.0f}% agree, "
            f"Cohen's kappa {kappa} (chance agreement {100 * self.expected:.0f}%){left}"
        )


def agreement(pairs: list[tuple[str, str]], not_judged: list[str] | None = None) -> Agreement:
    """Agreement of (human, judge) label pairs."""
    n = len(pairs)
    if not n:
        raise HarnessError("no labelled episode has a judgment: nothing to measure agreement on")
    human = Counter(h for h, _ in pairs)
    judge = Counter(j for _, j in pairs)
    both = Counter(h for h, j in pairs if h == j)
    observed = sum(both.values()) / n
    expected = sum(human[c] * judge[c] for c in human) / (n * n)
    kappa = None if expected == 1 else (observed - expected) / (1 - expected)
    classes = [
        ClassScore(
            label=c,
            support=human[c],
            predicted=judge[c],
            precision=both[c] / judge[c] if judge[c] else None,
            recall=both[c] / human[c] if human[c] else None,
        )
        for c in sorted(set(human) | set(judge))
    ]
    return Agreement(
        n=n, observed=observed, expected=expected, kappa=kappa, classes=classes, not_judged=not_judged or []
    )


def load_labels(path: Path) -> dict[str, str]:
    """Human labels: episode id (MODEL/TASK/seedN, as `harness show` names it) -> class. A .csv with
    the columns ``episode`` and ``label``, or .jsonl lines ``{"episode": ..., "label": ...}``."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise HarnessError(
            f"--labels {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    rows: list[dict[str, object]] = []
    if path.suffix == ".jsonl":
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise HarnessError(f"--labels {path}: line {lineno} is not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise HarnessError(f"--labels {path}: line {lineno} is not an object")
            rows.append(row)
    else:
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames or not {"episode", "label"} <= set(reader.fieldnames):
            raise HarnessError(f"--labels {path}: needs the columns episode and label (a .csv), or a .jsonl")
        rows = list(reader)
    labels: dict[str, str] = {}
    for i, row in enumerate(rows, 1):
        episode, label = row.get("episode"), row.get("label")
        if not isinstance(episode, str) or not isinstance(label, str) or not episode or not label:
            raise HarnessError(f"--labels {path}: row {i} needs an episode and a label (strings)")
        labels[episode] = label.strip()
    if not labels:
        raise HarnessError(f"--labels {path}: no labels in it")
    return labels
