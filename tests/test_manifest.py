"""The run manifest (run.json): every fact that produced a run, no secret, resumes only of the same
experiment, and `harness compare` told what differs (real evals on the replay server; a real
vLLM run's manifest, key scan and changed-adapter refusal: tests/test_eval_vllm.py)."""

import json
import shutil
from pathlib import Path

import pytest

from harness import provenance
from harness.evaluate import EvalConfig, run_eval
from harness.replay import ReplayScript, ReplayServer, ScriptedCall, ScriptedResponse
from harness.server.endpoint import ExternalEndpoint
from tests.conftest import REPO, run_harness
from tests.helpers.shared_vllm import TOOLCALL_LORA as LORA

pytestmark = pytest.mark.timeout(300)

FINISH = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": "done"})])
SECRET = "sk-manifest-test-4f1d9c0b7e"


def script(path: Path, text: str = "done") -> Path:
    resp = ScriptedResponse(tool_calls=[ScriptedCall(name="finish", arguments={"message": text})])
    path.write_text(
        ReplayScript(model="scripted", responses=[resp], when_exhausted="repeat_last").model_dump_json()
    )
    return path


def eval_replay(run: Path, model: str, *extra: str) -> "subprocess.CompletedProcess[str]":  # noqa: F821
    return run_harness(
        "eval", "--model", model, "--tasks", "smoke", "--limit", "1", "--runtime", "local",
        "--run-dir", str(run), *extra, timeout=240,
    )  # fmt: skip


@pytest.mark.slow
def test_manifest_holds_what_produced_the_run_and_no_api_key_anywhere(tmp_path: Path) -> None:
    """A run against someone's server with an API key: run.json has the harness (commit, dirty),
    package versions, the model, scaffold (tool schema hash), sampling and limits sent, the task
    set's content hash and the machine; the key appears in no file of the run directory."""
    run = tmp_path / "run"
    with ReplayServer(
        ReplayScript(model="scripted", responses=[FINISH], when_exhausted="repeat_last")
    ) as server:
        run_eval(
            EvalConfig(
                runtime="local",
                models=("scripted",),
                tasks="smoke",
                base_url=server.base_url,
                api_key=SECRET,
                run_dir=run,
                seeds=2,
                temperature=0.3,
            )
        )
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["manifest_version"] == 2
    assert manifest["harness"]["commit"] and isinstance(manifest["harness"]["dirty"], bool)
    assert manifest["packages"]["openhands-sdk"] and manifest["packages"]["openai"]
    assert manifest["model_info"]["scripted"]["kind"] == "external"
    assert manifest["model_info"]["scripted"]["served_name"] == "scripted"
    info = manifest["scaffold_info"]["openhands-codeact"]
    assert len(info["tool_schema_sha256"]) == 64 and info["runner"] == "openhands-sdk"
    assert info["sampling"]["temperature"] == 0.3 and manifest["sampling"]["temperature"] == 0.3
    assert manifest["limits"]["max_iterations"] and manifest["limits"]["agent_timeout_s"]
    assert manifest["task_set"]["count"] == 3 and len(manifest["task_set"]["hash"]) == 16
    assert manifest["machine"]["cpus"] >= 1 and "gpus" in manifest["machine"]
    assert manifest["started_at"] and manifest["ended_at"]
    leaks = [p for p in run.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaks, f"the API key is written in {leaks}"
    shown = run_harness("show-manifest", str(run))
    assert shown.returncode == 0, shown.stderr
    for fact in ("harness", "openhands-sdk", "tool schema", "temperature 0.3", "content hash", "CPUs"):
        assert fact in shown.stdout, (fact, shown.stdout)
    report = run_harness("report", str(run))
    assert report.returncode == 0, report.stderr
    assert "## Manifest" in (run / "report.md").read_text()
    assert 'id="manifest"' in (run / "report.html").read_text()


def test_a_changed_model_behind_the_same_model_flag_is_refused_and_unchanged_resumes(tmp_path: Path) -> None:
    """The replay script stands for the checkpoint: changed behind the same --model, the rerun is
    refused naming it (nothing runs, run.json is untouched); as it was, the rerun resumes; forced,
    it goes on and run.json says what changed."""
    model = f"replay:{script(tmp_path / 's.json')}"
    run = tmp_path / "run"
    first = eval_replay(run, model)
    assert first.returncode == 0, first.stderr
    before = (run / "run.json").read_text()
    script(tmp_path / "s.json", "another answer")
    refused = eval_replay(run, model)
    assert refused.returncode != 0
    said = refused.stderr.strip().splitlines()[-1]
    assert "not the same experiment" in said and "checkpoint behind scripted" in said, said
    assert "--force-resume" in said and "--run-dir" in said
    assert (run / "run.json").read_text() == before
    forced = eval_replay(run, model, "--force-resume")
    assert forced.returncode == 0, forced.stderr
    assert "--force-resume" in forced.stdout + forced.stderr
    invocations = json.loads((run / "run.json").read_text())["invocations"]
    assert "checkpoint behind scripted" in invocations[-1]["forced"][0]
    again = eval_replay(run, model)
    assert again.returncode == 0, again.stderr
    assert "0 new episodes" in again.stdout


def test_the_lora_adapter_fingerprint_names_the_weights_file_one_byte_changed(tmp_path: Path) -> None:
    from harness.server.bundled import ensure_bundled_model
    from harness.server.fingerprint import changed_files, fingerprint_checkpoint

    base = ensure_bundled_model("smollm2-135m")
    adapter = tmp_path / "lora"
    shutil.copytree(LORA, adapter)
    before = fingerprint_checkpoint(adapter, base, "lora")
    assert fingerprint_checkpoint(adapter, base, "lora") == before  # stable
    weights = adapter / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 1  # one byte of the weights
    weights.write_bytes(bytes(data))
    after = fingerprint_checkpoint(adapter, base, "lora")
    assert after["fingerprint"] != before["fingerprint"]
    assert changed_files(before, after) == ["adapter/adapter_model.safetensors"]
    (adapter / "README.md").write_text("a model card changes nothing served")
    assert fingerprint_checkpoint(adapter, base, "lora")["fingerprint"] == after["fingerprint"]


def test_full_weights_are_fingerprinted_by_header_and_samples_without_reading_them_whole(
    tmp_path: Path,
) -> None:
    """Same shapes, other weights (a fine-tune): the header is the same, a sampled block is not."""
    from harness.server.bundled import ensure_bundled_model
    from harness.server.fingerprint import changed_files, fingerprint_checkpoint

    model = tmp_path / "model"
    shutil.copytree(ensure_bundled_model("smollm2-135m"), model)
    before = fingerprint_checkpoint(model, model, "full")
    weights = model / "model.safetensors"
    with weights.open("r+b") as fh:  # the last byte: inside the sampled end block
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 1]))
    after = fingerprint_checkpoint(model, model, "full")
    assert changed_files(before, after) == ["model.safetensors"]


def _run_with(tmp_path: Path, name: str, temperature: float | None = None) -> Path:
    run = tmp_path / name
    extra = ("--temperature", str(temperature)) if temperature is not None else ()
    done = eval_replay(run, f"replay:{script(tmp_path / f'{name}.json')}", *extra)
    assert done.returncode == 0, done.stderr
    return run


def _set_template(run: Path, template: Path | None) -> None:
    """A vLLM model's record as preflight makes it (real inspection and fingerprint), put in a
    replay run: replay serves no template, and only the manifests are compared."""
    from harness.provenance import describe_checkpoint
    from harness.server.bundled import ensure_bundled_model
    from harness.server.checkpoint import inspect_checkpoint

    facts = describe_checkpoint(
        inspect_checkpoint(str(ensure_bundled_model("smollm2-135m")), chat_template=template)
    )
    data = json.loads((run / "run.json").read_text())
    data["model_info"]["scripted"] = {**data["model_info"]["scripted"], **facts}
    (run / "run.json").write_text(json.dumps(data))


@pytest.mark.slow
def test_compare_warns_on_another_temperature_and_refuses_another_chat_template(tmp_path: Path) -> None:
    a, b = _run_with(tmp_path, "a"), _run_with(tmp_path, "b", temperature=0.7)
    warned = run_harness("compare", str(a), str(b))
    assert warned.returncode == 0, warned.stderr
    assert "sampling temperature 0.0 vs 0.7" in warned.stdout, warned.stdout
    other = tmp_path / "other.jinja"
    other.write_text(
        (REPO / "scaffolds" / "chat-templates" / "chatml-hermes.jinja").read_text() + "\n{# v2 #}\n"
    )
    c = _run_with(tmp_path, "c")
    _set_template(a, None)
    _set_template(c, other)
    refused = run_harness("compare", str(a), str(c))
    assert refused.returncode != 0
    said = refused.stderr.strip().splitlines()[-1]
    assert "not comparable" in said and "chat template" in said and "--force" in said, said
    forced = run_harness("compare", str(a), str(c), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "forced:" in forced.stdout and "chat template" in forced.stdout


def test_runs_made_before_the_manifest_resume_and_compare_as_before(tmp_path: Path) -> None:
    """A run.json without the new fields: unknown facts, never a difference."""
    model = f"replay:{script(tmp_path / 's.json')}"
    run = tmp_path / "run"
    assert eval_replay(run, model).returncode == 0
    data = json.loads((run / "run.json").read_text())
    old_keys = (
        "run_id",
        "tasks",
        "suite",
        "tasks_source",
        "models",
        "seeds",
        "scaffold",
        "scaffold_hash",
        "runtime",
        "sampling",
    )
    (run / "run.json").write_text(json.dumps({k: data[k] for k in old_keys}))
    script(tmp_path / "s.json", "changed, but the old run cannot tell")
    again = eval_replay(run, model)
    assert again.returncode == 0, again.stderr
    shown = run_harness("show-manifest", str(run))
    assert shown.returncode == 0 and "before the full manifest" in shown.stdout, shown.stdout


def test_machine_facts_name_the_gpus_driver_and_cuda_from_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML as the lent H100 answers it (the fake NVML of tests/test_gpu_preflight.py, plus the two
    system calls): the manifest's machine names 2 x H100, driver 580 and CUDA 13.0."""
    from harness import provenance
    from harness.server import gpu
    from tests.test_gpu_preflight import FakeNvml, h100

    class Nvml(FakeNvml):
        def nvmlSystemGetDriverVersion(self) -> str:
            return "580.65.06"

        def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
            return 13000

    monkeypatch.setattr(gpu, "_nvml", lambda: Nvml([h100(0), h100(1)]))
    facts = provenance.machine_facts()
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA H100 80GB HBM3"] * 2
    assert facts["driver"] == "580.65.06" and facts["cuda"] == "13.0" and facts["cpus"] >= 1
    from harness.results.manifest import manifest_lines

    line = next(x for x in manifest_lines({"machine": facts}) if x.startswith("machine"))
    assert "2 x NVIDIA H100 80GB HBM3, driver 580.65.06, CUDA 13.0" in line


def test_secrets_vllm_would_parse_from_abbreviations_json_and_urls_never_reach_the_manifest() -> None:
    """vLLM's argparse takes an unambiguous prefix (``--api-ke`` is ``--api-key``); a secret also
    hides inside a JSON value or a URL given to some other flag. Each kept its value before."""
    argv = [
        "vllm", "--api-ke", SECRET, f"--hf-tok={SECRET}",
        "--hf-overrides", json.dumps({"auth": {"api_key": SECRET}, "n": 1}),
        f"--model-loader-extra-config={json.dumps({'token': SECRET})}",
        "--download-dir", f"https://bob:{SECRET}@mirror.example.com/x?sig={SECRET}",
        "--ssl-keyfile", "/k.pem", "--max-model-len", "2048", "--port", "8000",
    ]  # fmt: skip
    scrubbed = provenance.scrub_argv(argv)
    assert SECRET not in " ".join(scrubbed), scrubbed
    assert scrubbed[1:4] == ["--api-ke", "***", "--hf-tok=***"]
    assert json.loads(scrubbed[5]) == {"auth": {"api_key": "***"}, "n": 1}
    assert scrubbed[-6:] == argv[-6:]


def test_secret_flags_and_url_credentials_never_reach_the_manifest() -> None:
    """Any flag whose name says secret (key, token, secret, password) has its value hidden, in
    both spellings; flags that only look alike (a tokenizer, a token count) stay readable. A server
    URL loses its user:password and its query values (run.json records it)."""
    argv = [
        "python", "-m", "vllm.entrypoints.openai.api_server", "--api-key", SECRET, "--hf-token", SECRET,
        f"--hf_token={SECRET}", "--client-secret", SECRET, f"--db-password={SECRET}", "--apikey", SECRET,
        "--tokenizer", "/models/tok", "--max-num-batched-tokens", "2048", "--ssl-keyfile", "/k.pem",
    ]  # fmt: skip
    scrubbed = provenance.scrub_argv(argv)
    assert SECRET not in " ".join(scrubbed)
    assert scrubbed[3:13] == [
        "--api-key", "***", "--hf-token", "***", "--hf_token=***", "--client-secret", "***",
        "--db-password=***", "--apikey", "***",
    ]  # fmt: skip
    assert scrubbed[-6:] == argv[-6:]
    assert provenance.scrub_env({"HF_TOKEN": SECRET, "VLLM_CPU_KVCACHE_SPACE": "4"}) == {
        "HF_TOKEN": "***",
        "VLLM_CPU_KVCACHE_SPACE": "4",
    }
    url = f"https://alice:{SECRET}@llm.example.com:8443/v1?token={SECRET}&tier=a"
    shown = ExternalEndpoint(url, "k", "m").describe()["base_url"]
    assert SECRET not in shown and "alice" not in shown
    assert shown.startswith("https://***@llm.example.com:8443/") and "token=***" in shown
    assert (
        ExternalEndpoint("http://127.0.0.1:8000", "k", "m").describe()["base_url"]
        == "http://127.0.0.1:8000/v1"
    )


def _first_manifest(config: EvalConfig, run: Path) -> "RunManifest":  # noqa: F821
    """The manifest `harness eval` builds at its start for ``config`` (nothing started): the same
    steps as evaluate._run_eval, up to store.init."""
    from harness import registry
    from harness.evaluate import _sampling, _scaffolds_hash, _tasks, make_arms, make_runtime
    from harness.run_manifest import build_manifest

    arms = make_arms(config)
    runtime = make_runtime(config.runtime, config.sandbox)
    tasks = _tasks(config, images=False)
    executor = registry.load("executor", config.executor.name, flag="--executor")(config)
    endpoints = [executor.endpoint(config, m, run) for m in config.models]
    return build_manifest(
        config,
        run_dir=run,
        tasks=tasks,
        endpoints=endpoints,
        arms=arms,
        runtime=runtime.name,
        sampling=_sampling(config, next(iter(arms.values())).scaffold),
        scaffold_hash=_scaffolds_hash(arms),
    )


def _adapter_run(adapter: Path, run: Path) -> tuple[EvalConfig, dict]:
    """A run of ``adapter`` (one smoke task, mini-swe-agent) begun as its first invocation begins
    it, without a server: its config and the run.json written."""
    from harness.results.store import RunStore

    config = EvalConfig(
        models=(str(adapter),),
        tasks="smoke",
        limit=1,
        runtime="local",
        scaffolds=("mini-swe-agent",),
        run_dir=run,
    )
    assert RunStore(run).init(_first_manifest(config, run)) == []
    return config, json.loads((run / "run.json").read_text())


def test_a_resume_under_another_vllm_version_is_refused_before_any_server_starts(tmp_path: Path) -> None:
    """run.json says the run's first invocation served the adapter under vLLM 0.0.1 (another
    environment); this machine's vLLM environment has another: the rerun is refused in one line
    naming both versions, before any server starts. Forced, it goes on, and run.json records what
    changed and each invocation's vLLM and torch."""
    from harness.results.store import RunStore
    from tests.conftest import vllm_processes

    run = tmp_path / "run"
    config, manifest = _adapter_run(LORA, run)
    (name,) = manifest["model_info"]
    here = dict(manifest["model_info"][name]["server_env"])
    assert here["vllm"] and here["torch"], here
    assert manifest["invocations"][0]["server_env"] == {name: {"vllm": here["vllm"], "torch": here["torch"]}}
    manifest["model_info"][name]["server_env"]["vllm"] = "0.0.1"
    (run / "run.json").write_text(json.dumps(manifest))

    refused = eval_replay(run, str(LORA), "--scaffold", "mini-swe-agent")
    assert refused.returncode != 0
    said = refused.stderr.strip().splitlines()[-1]
    assert "not the same experiment" in said and f"vLLM 0.0.1 vs {here['vllm']}" in said, said
    assert "--force-resume" in said
    assert not vllm_processes() and not (run / "server.log").exists()

    forced = RunStore(run).init(_first_manifest(config, run), force=True)
    assert any(f"vLLM 0.0.1 vs {here['vllm']}" in f for f in forced), forced
    after = json.loads((run / "run.json").read_text())
    assert after["model_info"][name]["server_env"]["vllm"] == here["vllm"]
    last = after["invocations"][-1]
    assert last["server_env"][name]["vllm"] == here["vllm"] and any("vLLM" in f for f in last["forced"])


def test_an_adapter_s_manifest_and_a_changed_adapter_refused_before_any_server(tmp_path: Path) -> None:
    """run.json of a LoRA adapter's run as its first invocation writes it (a real vLLM run's, with
    the launched argv and its keys in no file: tests/test_eval_vllm.py): the adapter's and its base's
    fingerprints, the vLLM argv with --enable-lora and no key, the template and parser in force, the
    server's environment. A byte of the adapter's weights changed: the rerun is refused naming the
    file, before any server starts; put back, the same run accepts it again."""
    from harness.results.store import RunStore
    from tests.conftest import vllm_processes

    adapter = tmp_path / "lora"
    shutil.copytree(LORA, adapter)
    run = tmp_path / "run"
    config, manifest = _adapter_run(adapter, run)
    (name,) = manifest["model_info"]
    info = manifest["model_info"][name]
    assert info["kind"] == "vllm" and info["checkpoint"]["kind"] == "lora"
    assert "adapter_model.safetensors" in info["checkpoint"]["adapter"]["files"]
    assert info["checkpoint"]["base"]["files"]["model.safetensors"]
    assert info["served_name"] and info["request_name"] == name == "lora"
    assert info["tool_call_parser"] == "hermes" and len(info["chat_template"]["sha256"]) == 64
    assert "--enable-lora" in info["vllm_argv"] and "--api-key" not in info["vllm_argv"]
    assert info["server_env"]["vllm"] and info["server_env"]["torch"], info["server_env"]
    assert manifest["packages"]["mini-swe-agent"] == "2.4.6" and manifest["machine"]["cpus"]

    weights = adapter / "adapter_model.safetensors"
    original = weights.read_bytes()
    changed = bytearray(original)
    changed[len(changed) // 2] ^= 1
    weights.write_bytes(bytes(changed))
    refused = eval_replay(run, str(adapter), "--scaffold", "mini-swe-agent")
    assert refused.returncode != 0
    said = refused.stderr.strip().splitlines()[-1]
    assert "checkpoint behind" in said and "adapter/adapter_model.safetensors" in said, said
    assert not vllm_processes() and not (run / "server.log").exists()
    weights.write_bytes(original)
    assert RunStore(run).init(_first_manifest(config, run)) == []
