"""--concurrency auto's host side (harness/admission/host.py) through the controller, with a fake
host and a fake server: pure logic, a clock of our own."""

from harness.admission.controller import AdmissionController, LoadSample
from harness.admission.host import HostPolicy, HostSample
from harness.admission.start import HostRoom, auto_start, memory_room

ROOMY = dict(running=1.0, waiting=0.0, kv_cache_usage=0.1, preemptions=0.0)


def host(t: float, runnable: float = 0.0, free: float = 0.8, pressure: float | None = 0.0) -> HostSample:
    return HostSample(t=t, cores=2.0, runnable=runnable, memory_available=free, memory_pressure=pressure)


def load(t: float, turns: float | None = None, **kw: float) -> LoadSample:
    return LoadSample(t=t, turns=turns, **{**ROOMY, **kw})


def test_cpu_saturation_sustained_sheds_and_a_spike_does_not() -> None:
    c = AdmissionController(start=4, cap=16, host_policy=HostPolicy(sustained=3))
    assert c.decide(4, load(0), host=host(0, runnable=6)).action != "shed"  # one sample: a spike
    assert c.decide(4, load(2), host=host(2, runnable=1)).action != "shed"  # and it passed
    decisions = [c.decide(4, load(t), host=host(t, runnable=5)) for t in (4, 6, 8)]
    assert [d.action for d in decisions][-1] == "shed"
    shed = decisions[-1]
    assert shed.resource == "host cpu" and shed.limit == 3 and "2.5 per core" in shed.reason
    # draining until the host has room again, then growth may resume
    assert c.decide(3, load(10), host=host(10, runnable=5)).action == "hold"
    assert c.decide(3, load(12), host=host(12, runnable=0.5)).action == "drained"


def test_memory_short_or_under_pressure_sheds_at_once() -> None:
    c = AdmissionController(start=4, cap=16)
    d = c.decide(4, load(0), host=host(0, free=0.05))
    assert (d.action, d.resource, d.limit) == ("shed", "host memory", 3)
    c = AdmissionController(start=4, cap=16)
    d = c.decide(4, load(0), host=host(0, pressure=25.0))
    assert (d.action, d.resource) == ("shed", "host memory") and "memory pressure 25%" in d.reason


def _climb(rates: list[float], settle: float = 30.0) -> list[tuple[int, str]]:
    """Run the controller with every slot taken, the turn rate at limit L being rates[L - 1] per
    minute; each settle period one decision with the rate measured. (limit, action) per decision."""
    c = AdmissionController(start=1, cap=len(rates), host_policy=HostPolicy(settle_s=settle))
    t, turns, out = 0.0, 0.0, []
    c.decide(1, load(t, turns=turns), host=host(t))
    for _ in range(3 * len(rates)):
        rate = rates[c.limit - 1]
        for _ in range(int(settle // 2) + 1):  # scrapes every 2 s
            t += 2
            turns += rate * 2 / 60
            d = c.decide(c.limit, load(t, turns=turns), host=host(t))
            if d.action in ("grow", "shed"):
                break
        out.append((d.limit, d.action))
    return out


def test_a_rising_turn_rate_grows_and_a_flat_one_holds() -> None:
    steps = _climb([10.0, 18.0, 24.0, 24.5, 30.0, 40.0])
    limits = [limit for limit, _ in steps]
    # 1 -> 2 (the first step needs no comparison), 2 -> 3 (18 > 10), 3 -> 4 (24 > 18), then at 4
    # the rate is flat (24.5 vs 24: under 5%): it holds there, whatever limit 5 would have bought
    assert max(limits) == 4 and limits[-1] == 4
    assert steps[-1][1] == "hold"


def test_without_a_turn_count_the_host_side_decides_no_growth() -> None:
    c = AdmissionController(start=1, cap=4)
    assert c.decide(1, load(0), host=host(0)).action == "grow"  # the server's rules alone, as before


def test_a_sandbox_s_cpu_limit_counts_nothing_its_memory_bounds_the_start() -> None:
    n, why = memory_room(HostRoom(cores=2, memory_gib=21), 4)
    assert n == 5 and "do not count them" in why
    start = auto_start(sandboxes=n, sandbox_why=why, full_sequences=11, max_num_seqs=11)
    assert (start.start, start.cap) == (5, 64)
    capped = auto_start(sandboxes=n, sandbox_why=why, full_sequences=11, max_num_seqs=11, max_concurrency=3)
    assert (capped.start, capped.cap) == (3, 3)
