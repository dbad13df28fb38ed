"""The server timeline (server_metrics.jsonl -> busy time, GPU-hours, headline notes) and the plots."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.patches import Rectangle

from harness.results.metrics import headline, model_metrics
from harness.results.plots import grouped_bars_figure, timeline_plot, turns_figure
from harness.results.runs import load_run
from harness.results.timeline import load_timeline
from tests.helpers.runs import record, write_run

T0 = 1_800_000_000.0
SERVER = "base+ft"


def event(t: float, name: str, note: str = "") -> dict[str, object]:
    return {"kind": "event", "t": T0 + t, "server": SERVER, "event": name, "note": note}


def sample(t: float, running: float = 0, tokens: float = 0, **kw: float) -> dict[str, object]:
    values = {
        "waiting": 0.0,
        "kv_cache_usage": 0.1,
        "prompt_tokens": 0.0,
        "prefix_cache_queries": 0.0,
        "prefix_cache_hits": 0.0,
        "preemptions": 0.0,
    }
    values.update(kw)
    return {
        "kind": "sample",
        "t": T0 + t,
        "server": SERVER,
        "running": running,
        "generation_tokens": tokens,
        **values,
    }


def two_servers() -> list[dict[str, object]]:
    """Server 1: up 0-60 s, ready at 10, busy only for the samples at 20..30 (12 s), idle shutdown.
    Server 2 (a fresh process, counters from 0): up 100-121 s, ready at 105, busy 106..120
    (every sample after the first), 3 preemptions at a full KV cache, stopped when rollouts ended."""
    lines = [event(0, "start"), event(10, "ready")]
    tokens = 0.0
    for t in range(10, 52, 2):
        busy = 20 <= t <= 30
        tokens += 50 if busy else 0
        lines.append(
            sample(
                t,
                running=1 if busy else 0,
                tokens=tokens,
                prefix_cache_queries=t * 10,
                prefix_cache_hits=t * 5,
            )
        )
    lines += [event(60, "stop", "idle for 10 s"), event(100, "start"), event(105, "ready")]
    for i, t in enumerate(range(106, 122, 2)):
        lines.append(sample(t, running=2, tokens=100.0 * i, kv_cache_usage=1.0, preemptions=min(i, 3)))
    lines.append(event(121, "stop", "rollouts done"))
    return lines


def write_metrics(root: Path, lines: list[dict[str, object]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "server_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_busy_time_up_time_and_notes_by_hand(tmp_path: Path) -> None:
    t = load_timeline(write_metrics(tmp_path, two_servers()))
    assert t is not None
    assert [(s.start, s.ready, s.stop, s.stop_reason) for s in t.segments] == [
        (0.0, 10.0, 60.0, "idle for 10 s"),
        (100.0, 105.0, 121.0, "rollouts done"),
    ]
    # Server 1: 6 busy samples x 2 s. Server 2: 7 intervals of 2 s after its first sample (which has
    # no interval: its counters are not differenced against server 1's).
    assert [s.busy_s for s in t.segments] == pytest.approx([12.0, 14.0])
    assert (t.up_s, t.busy_s) == pytest.approx((81.0, 26.0))
    assert t.busy_fraction == pytest.approx(26 / 81)
    assert t.preemptions == 3 and t.kv_peak == 1.0
    assert t.prefix_hit_rate == pytest.approx(0.5)
    assert t.gpu_hours() == pytest.approx(81 / 3600)
    summary = t.summary(gpu_price=2.5)
    assert "0.022 GPU-hours = 0.06 at 2.5/hour" in summary
    assert "2 server starts (stops: idle for 10 s, rollouts done)" in summary
    notes = t.headline_notes()
    assert notes[0] == "server mostly idle: busy 32% of its 81 s up (15 s of that was start-up)"
    assert notes[1].startswith("3 preemption(s): the KV cache filled (peak 100%)")
    assert "--concurrency auto" in notes[1]
    # While busy: server 1 made 300 tokens with 1 running over 12 s, server 2 700 with 2 over 14 s.
    assert t.generation_tokens_per_busy_s == pytest.approx(1000 / 26)
    assert t.mean_running_busy == pytest.approx((12 * 1 + 14 * 2) / 26)
    assert t.kv_p95 == pytest.approx(1.0)
    assert t.max_num_seqs is None and t.ttft_p50 is None and t.admission is None  # none recorded
    assert "38 generation tokens/s while busy, 1.5 requests running on average" in summary
    assert t.use(episodes=9, gpu_price=3.6).endswith("9 GPU-seconds per episode = 0.0090 at 3.6/GPU-hour")
    # tokens/s: server 2 makes 100 tokens per 2 s; server 1 at most 50 per 2 s.
    assert t.samples["tokens_per_s"].max() == pytest.approx(50.0)


def test_interrupted_server_and_bad_lines(tmp_path: Path) -> None:
    lines = two_servers()[:10]  # killed mid-run: no stop line
    root = write_metrics(tmp_path, lines)
    with (root / "server_metrics.jsonl").open("a") as fh:
        fh.write("{not json\n")
    t = load_timeline(root)
    assert t is not None and len(t.segments) == 1
    seg = t.segments[0]
    assert seg.stop is None and "not recorded" in seg.stop_reason
    assert seg.up_s == pytest.approx(24.0)  # until the last sample
    assert any("1 unreadable line(s) skipped" in n for n in t.notes)
    assert load_timeline(tmp_path / "nothing") is None


def test_killed_server_is_up_until_its_last_sample_not_the_next_start(tmp_path: Path) -> None:
    """A SIGKILLed run writes no stop line; the next eval starts a server 40 s later. The first
    server's up time ends at its last sample (50 s), not at the resumed run's start (100 s)."""
    lines = [x for x in two_servers() if x.get("note") != "idle for 10 s"]
    t = load_timeline(write_metrics(tmp_path, lines))
    assert t is not None
    assert [(s.up_s, s.stop_reason) for s in t.segments] == [(50.0, "not recorded"), (21.0, "rollouts done")]


def test_a_slow_exit_is_up_time_after_the_stop_began(tmp_path: Path) -> None:
    """vLLM may take its whole SIGTERM grace to exit (fresh1: 15 s on a loaded box): scraping ends
    when the stop begins, the up time when the process is gone; the segment says both."""
    lines = two_servers()
    at = next(i for i, x in enumerate(lines) if x.get("note") == "rollouts done")
    lines.insert(at, event(lines[at]["t"] - T0 - 15, "stopping", "rollouts done"))  # type: ignore[operator]
    t = load_timeline(write_metrics(tmp_path, lines))
    assert t is not None
    first, last = t.segments
    assert first.stopping is None  # no such line (as files of earlier versions have none)
    assert (last.stopping, last.stop, last.up_s) == (106.0, 121.0, 21.0)


def test_scrape_stopped_note_reaches_the_headline(tmp_path: Path) -> None:
    lines = two_servers()
    lines.insert(8, event(22, "scrape_stopped", "http://127.0.0.1:1/metrics failed 3 times running"))
    run = write_run(tmp_path / "run", [record("t1", model="base"), record("t2", model="base", reward=0.0)])
    write_metrics(run, lines)
    metrics = model_metrics(load_run(run))
    line = headline(metrics[0])
    assert "server mostly idle" in line and "failed 3 times running" in line and "preemption" in line
    # How well the server was used, and what each episode cost in GPU time (81 s over 2 episodes).
    assert "; server: 38 generation tokens/s while busy, 1.5 requests running on average, " in line
    assert "40 GPU-seconds per episode" in line


def test_resumed_run_says_one_server_time_everywhere(tmp_path: Path) -> None:
    """Ctrl-C then resume: server_metrics.jsonl holds both starts (81 s up, 26 s busy), while
    server_stats.jsonl holds only the resumed one's line (as a SIGKILLed first run leaves it, and as
    every stopped run left it before). The eval summary, the report's table, its server section
    and the headline all say 81 / 26: the sum over starts, from one source."""
    from harness.evaluate import _summaries
    from harness.results.report import write_report

    lines = two_servers()
    lines[-1] = event(121, "stop", "rollouts done")
    run = write_run(
        tmp_path / "run",
        [record("t1", model="base"), record("t2", model="base", reward=0.0), record("t1", model="ft")],
    )
    write_metrics(run, lines)
    (run / "server_stats.jsonl").write_text(
        json.dumps({"model": SERVER, "up_s": 21.0, "busy_s": 14.0}) + "\n"
    )
    rows, headlines = _summaries(run, {"base": "base", "ft": "ft"})
    assert [(r.server_up_s, r.server_busy_s) for r in rows] == [(81.0, 26.0), (81.0, 26.0)]
    assert "busy 32% of its 81 s up" in headlines[0]
    files = write_report(run)
    assert [(m.server_up_s, m.server_busy_s) for m in files.metrics] == [(81.0, 26.0), (81.0, 26.0)]
    md = files.markdown.read_text()
    assert md.count("| 81 s / 26 s |") == 2  # the table, a row per model
    assert "- server up 81 s, busy 26 s (32%)" in md  # the server section
    csv = pd.read_csv(files.csv)
    assert csv[csv["seed"] == "all"][["server_up_s", "server_busy_s"]].values.tolist() == [[81, 26]] * 2


def test_server_seconds_without_a_timeline_sum_every_line(tmp_path: Path) -> None:
    """No timeline (scraping off), two models on two servers: the table says each server's seconds
    and the server section their sum, from server_stats.jsonl's lines (it took the largest one)."""
    from harness.results.report import write_report

    run = write_run(tmp_path / "run", [record("t1", model="base"), record("t1", model="ft", reward=0.0)])
    (run / "server_stats.jsonl").write_text(
        json.dumps({"model": "base", "up_s": 60.0, "busy_s": 12.0})
        + "\n"
        + json.dumps({"model": "ft", "up_s": 21.0, "busy_s": 14.0})
        + "\n"
    )
    md = write_report(run).markdown.read_text()
    assert "| 60 s / 12 s |" in md and "| 21 s / 14 s |" in md
    assert "- server up 81 s, busy 26 s;" in md


def bar_rectangles(fig: object) -> list[Rectangle]:
    ax = fig.axes[0]  # type: ignore[attr-defined]
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_height() > 0]


def test_turns_histogram_has_one_bar_per_whole_turn_count() -> None:
    episodes = pd.DataFrame({"model": ["a", "a", "a", "b", "b"], "turns": [1, 3, 3, 2, 3]})
    fig = turns_figure(episodes, ["a", "b"])
    ax = fig.axes[0]
    ticks = [x for x in ax.get_xticks() if ax.get_xlim()[0] <= x <= ax.get_xlim()[1]]
    assert ticks and all(float(x).is_integer() for x in ticks)
    assert all(float(y).is_integer() for y in ax.get_yticks())
    bars = bar_rectangles(fig)
    # Each bar sits within +-0.4 of a whole number of turns and counts whole episodes.
    centres = [b.get_x() + b.get_width() / 2 for b in bars]
    assert all(abs(c - round(c)) < 0.4 for c in centres)
    counts = {(round(c), b.get_facecolor()[:3]): b.get_height() for c, b in zip(centres, bars, strict=True)}
    assert sorted(counts.values()) == [1, 1, 1, 2]
    # One colour per model, the same as in every other plot.
    colours = {b.get_facecolor()[:3] for b in bars}
    assert len(colours) == 2


def test_empty_bar_charts_say_so_in_words() -> None:
    fig = grouped_bars_figure(
        ["a", "b"], [{}, {"repeat_call": 0.0}], "Loop kinds", "episodes (%)", "no loops"
    )
    ax = fig.axes[0]
    assert not ax.axison  # no axes drawn around nothing
    assert [t.get_text() for t in ax.texts] == ["no loops"]
    full = grouped_bars_figure(["a", "b"], [{"cycle": 10.0}, {}], "Loop kinds", "episodes (%)", "no loops")
    assert full.axes[0].axison and full.axes[0].get_ylim()[0] == 0


def test_timeline_plot_marks_phases(tmp_path: Path) -> None:
    t = load_timeline(write_metrics(tmp_path, two_servers()))
    assert t is not None
    png = timeline_plot(t, tmp_path / "timeline.png")
    from PIL import Image

    with Image.open(png) as img:
        rgb = np.asarray(img.convert("RGB"))
    assert rgb.shape[1] >= 800
    # The idle-shutdown line is drawn in its red (#b6443b).
    red = np.all(np.abs(rgb.astype(int) - [0xB6, 0x44, 0x3B]) < 30, axis=2)
    assert red.sum() > 50


def one_auto_server(tmp_path: Path, admission: list[dict[str, object]] | None) -> Path:
    """A server of --max-num-seqs 8 running one request through its busy time, its KV cache low;
    vLLM's time-to-first-token histogram at its last sample; auto's decisions if given."""
    ttft = {"0.5": 2.0, "1.0": 6.0, "2.5": 9.0, "5.0": 10.0, "+Inf": 10.0}
    ready = {**event(5, "ready"), "max_num_seqs": 8}
    lines = [event(0, "start"), ready]
    lines += [sample(t, running=1, tokens=10.0 * t) for t in range(6, 40, 2)]
    lines.append({**sample(40, running=0, tokens=400.0), "ttft_buckets": ttft})
    lines.append(event(41, "stop", "rollouts done"))
    root = write_metrics(tmp_path, lines)
    if admission is not None:
        (root / "admission.jsonl").write_text("".join(json.dumps(x) + "\n" for x in admission))
    return root


def decision(t: float, limit: int, admitted: int, action: str = "hold") -> dict[str, object]:
    return {
        "t": T0 + t,
        "limit": limit,
        "cap": 2,
        "admitted": admitted,
        "action": action,
        "reason": "",
        "server": "m",
    }


def test_server_use_time_to_first_token_and_what_an_empty_batch_should_change(tmp_path: Path) -> None:
    capped = [decision(5, 2, 0, "start"), *[decision(t, 2, 2) for t in range(6, 40, 2)]]
    t = load_timeline(one_auto_server(tmp_path / "auto", capped))
    assert t is not None and t.max_num_seqs == 8
    # Interpolated in the bucket as Prometheus does: rank 5 of 10 in (0.5, 1] holding 4 -> 0.875 s;
    # rank 9.5 in (2.5, 5] holding 1 -> 3.75 s.
    assert (t.ttft_p50, t.ttft_p95) == pytest.approx((0.875, 3.75))
    assert t.mean_running_busy == pytest.approx(16 / 17)  # the last busy interval ends with none running
    assert "time to first token p50 875 ms, p95 3.8 s" in t.summary()
    why = t.diagnosis()
    assert why is not None and why.startswith("the batch was mostly empty: 0.9 of 8 sequences running")
    assert "--concurrency auto stayed at its cap of 2" in why and why in t.headline_notes()
    held = [{**d, "cap": 64} for d in capped]  # under its cap: the host or the rate held it, not the cap
    under = load_timeline(one_auto_server(tmp_path / "held", held))
    assert under is not None and "--concurrency auto held it there" in (under.diagnosis() or "")
    fixed = load_timeline(one_auto_server(tmp_path / "fixed", None))
    assert fixed is not None and (fixed.diagnosis() or "").endswith(
        "raise --concurrency, or use --concurrency auto"
    )
    # The admission limit (dashed, #333) and the episodes in flight (orange) in the requests panel.
    png = timeline_plot(t, tmp_path / "timeline.png")
    from PIL import Image

    with Image.open(png) as img:
        rgb = np.asarray(img.convert("RGB"))
    top = rgb[: rgb.shape[0] // 4]
    orange = np.all(np.abs(top.astype(int) - [0xD9, 0x82, 0x2B]) < 30, axis=2)
    assert orange.sum() > 50
    bare = timeline_plot(fixed, tmp_path / "bare.png")
    with Image.open(bare) as img:
        top = np.asarray(img.convert("RGB"))[: rgb.shape[0] // 4]
    assert np.all(np.abs(top.astype(int) - [0xD9, 0x82, 0x2B]) < 30, axis=2).sum() < 10
