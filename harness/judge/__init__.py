"""A judge you can check: `harness analyze` puts each failed episode in a rubric's class, beside the
harness's deterministic cause, and measures the judge against human labels."""

from harness._lazy import lazy_getattr

_EXPORTS = {
    "Agreement": "harness.judge.labels",
    "ClassScore": "harness.judge.labels",
    "agreement": "harness.judge.labels",
    "load_labels": "harness.judge.labels",
    "AnalyzeConfig": "harness.judge.config",
    "Analysis": "harness.judge.analyze",
    "Judgment": "harness.judge.analyze",
    "analyze": "harness.judge.analyze",
    "judgments_file": "harness.judge.analyze",
    "Answer": "harness.judge.answer",
    "parse_answer": "harness.judge.answer",
    "DEFAULT_RUBRIC": "harness.judge.rubric",
    "Rubric": "harness.judge.rubric",
    "RubricClass": "harness.judge.rubric",
    "load_rubric": "harness.judge.rubric",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr("harness.judge", _EXPORTS)
