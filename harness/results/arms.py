"""Which arms `harness compare` pairs: two models, or one model under two scaffolds.

An arm is what the records call a model: MODEL in a one-scaffold run, MODEL@SCAFFOLD in a run of
several (harness/rollout.py ``arm_label``); each record says its scaffold (older runs: run.json's).
A scaffold comparison pairs MODEL@A with MODEL@B, in one run or across two runs made with different
single scaffolds, and is asked for with --scaffold-a / --scaffold-b (and --model when the runs hold
several models; without it each model is compared in turn), or implied:
- ``compare RUN`` on a run of exactly two arms, one model under two scaffolds;
- ``compare RUN_A RUN_B`` on two one-scaffold runs of different scaffolds that share a model;
- --model-a / --model-b naming two arms of one model under two scaffolds.
"""

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.results.attribution import ScaffoldPair
from harness.results.compare import pick_model
from harness.results.runs import RunData


@dataclass(frozen=True)
class Arm:
    label: str  # the records' model: MODEL, or MODEL@SCAFFOLD
    model: str
    scaffold: str | None  # None: neither the records nor run.json say


@dataclass(frozen=True)
class Pairing:
    """One comparison to make: the arms' labels (None: the run's only one) and, for one model under
    two scaffolds, which."""

    label_a: str | None
    label_b: str | None
    scaffolds: ScaffoldPair | None = None


def run_arms(run: RunData) -> list[Arm]:
    """The run's arms in its order (run.json's models first), each with its model and scaffold."""
    listed = str(run.manifest.get("scaffold") or "").split(",")
    default = listed[0] if len(listed) == 1 and listed[0] else None
    scaffold_of: dict[str, str | None] = {}
    for r in run.records():
        if scaffold_of.get(r.model) is None:
            scaffold_of[r.model] = r.scaffold or default
    arms = []
    for label in run.models:
        scaffold = scaffold_of.get(label)
        suffix = f"@{scaffold}"
        model = label.removesuffix(suffix) if scaffold and label.endswith(suffix) else label
        arms.append(Arm(label=label, model=model, scaffold=scaffold))
    return arms


def _scaffolds(arms: list[Arm]) -> list[str]:
    return list(dict.fromkeys(a.scaffold for a in arms if a.scaffold))


def _as_pair(a: Arm, b: Arm) -> ScaffoldPair | None:
    """The two arms as one model under two scaffolds, or None when they are not."""
    if a.model == b.model and a.scaffold and b.scaffold and a.scaffold != b.scaffold:
        return ScaffoldPair(a.model, a.scaffold, b.scaffold)
    return None


def _other(given: str | None, flag: str, run: RunData, scaffolds: list[str], besides: str | None) -> str:
    """The scaffold ``flag`` names, or the one ``run`` has besides the other side's."""
    if given is not None:
        if given not in scaffolds:
            raise HarnessError(
                f"{flag} {given}: not in {run.root} (scaffolds there: {', '.join(scaffolds) or 'none'})"
            )
        return given
    left = [s for s in scaffolds if s != besides]
    if len(left) != 1:
        raise HarnessError(
            f"{flag}: needed, {run.root} has {'no other scaffold' if not left else 'scaffolds ' + ', '.join(left)}"
        )
    return left[0]


def _scaffold_pairings(
    a: RunData, b: RunData, scaffold_a: str | None, scaffold_b: str | None, model: str | None
) -> list[Pairing]:
    arms_a, arms_b = run_arms(a), run_arms(b)
    sa = _other(scaffold_a, "--scaffold-a", a, _scaffolds(arms_a), scaffold_b)
    sb = _other(scaffold_b, "--scaffold-b", b, _scaffolds(arms_b), sa)
    if a is b and sa == sb:
        raise HarnessError(f"--scaffold-a and --scaffold-b are both {sa}: name two different scaffolds")
    under_a = {x.model: x for x in arms_a if x.scaffold == sa}
    under_b = {x.model: x for x in arms_b if x.scaffold == sb}
    common = [m for m in under_a if m in under_b]
    if model is not None:
        if model not in common:
            ran = ", ".join(common) or "none"
            raise HarnessError(
                f"--model {model}: did not run under both {sa} and {sb} (models that did: {ran})"
            )
        common = [model]
    if not common:
        raise HarnessError(
            f"no model ran under both {sa} ({', '.join(under_a) or 'none'}) and {sb} "
            f"({', '.join(under_b) or 'none'}): nothing to pair"
        )
    return [Pairing(under_a[m].label, under_b[m].label, ScaffoldPair(m, sa, sb)) for m in common]


def _implied(a: RunData, b: RunData) -> list[Pairing] | None:
    """The scaffold comparison a bare ``compare RUN [RUN_B]`` means, if it means one."""
    arms_a = run_arms(a)
    if a is b:
        if len(arms_a) == 2 and (pair := _as_pair(*arms_a)):
            return [Pairing(arms_a[0].label, arms_a[1].label, pair)]
        return None
    arms_b = run_arms(b)
    sa, sb = _scaffolds(arms_a), _scaffolds(arms_b)
    if len(sa) == len(sb) == 1 and sa != sb and {x.model for x in arms_a} & {x.model for x in arms_b}:
        return _scaffold_pairings(a, b, sa[0], sb[0], None)
    return None


def pairings(
    a: RunData,
    b: RunData,
    *,
    model_a: str | None = None,
    model_b: str | None = None,
    scaffold_a: str | None = None,
    scaffold_b: str | None = None,
    model: str | None = None,
) -> list[Pairing]:
    """The comparisons `harness compare` makes of runs a and b (the same object for one run)."""
    if (scaffold_a or scaffold_b) and (model_a or model_b):
        raise HarnessError(
            "--model-a/--model-b pair two models, --scaffold-a/--scaffold-b one model under two scaffolds: "
            "give one kind (name the model of a scaffold comparison with --model)"
        )
    if scaffold_a or scaffold_b or model:
        if model_a or model_b:
            raise HarnessError(
                "--model names the model of a scaffold comparison: not with --model-a/--model-b"
            )
        return _scaffold_pairings(a, b, scaffold_a, scaffold_b, model)
    if not (model_a or model_b) and (implied := _implied(a, b)):
        return implied
    try:
        la, lb = pick_model(a, model_a, "--model-a"), pick_model(b, model_b, "--model-b")
    except HarnessError as exc:
        if len(_scaffolds(run_arms(a))) > 1:  # the arms of a run of several scaffolds
            raise HarnessError(
                f"{exc}; or compare its scaffolds with --scaffold-a/--scaffold-b (and --model)"
            ) from None
        raise
    by_a = {x.label: x for x in run_arms(a)}
    by_b = by_a if a is b else {x.label: x for x in run_arms(b)}
    return [Pairing(la, lb, _as_pair(by_a[la], by_b[lb]))]


def scaffold_sentences(run: RunData) -> list[str]:
    """For a run of several scaffolds, each model's first scaffold against each other one: the
    sentence saying whether its loops and format errors follow the scaffold or the model, with the
    command that shows the paired table (for the report)."""
    from harness.results.compare import compare

    arms = run_arms(run)
    lines = []
    for model in dict.fromkeys(x.model for x in arms):
        mine = [x for x in arms if x.model == model and x.scaffold]
        for other in mine[1:]:
            first = mine[0]
            pair = _as_pair(first, other)
            if pair is None:
                continue
            try:
                c = compare(run, run, first.label, other.label, scaffolds=pair)
            except HarnessError as exc:  # nothing scored on a side yet: say why instead
                lines.append(f"{model}, {pair.a} vs {pair.b}: not compared ({exc})")
                continue
            assert c.attribution is not None
            lines.append(
                f"{model}, {pair.a} vs {pair.b}: {c.attribution.sentence} (paired table: harness compare "
                f"{run.root} --scaffold-a {pair.a} --scaffold-b {pair.b}"
                + (f" --model {model}" if len({x.model for x in arms}) > 1 else "")
                + ")"
            )
    return lines
