"""Kubeflow compile: strict proto validation, accelerators, node pools, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tfx_accum.components.config.search_space import SearchSpace
from tfx_accum.pipeline import InputError
from tfx_accum.pipeline.beam_args import BEAM_PLUGIN_ARG
from tfx_accum.pipeline.cli.parser import main
from tfx_accum.pipeline.kubeflow.compiler import compile_pipeline
from tfx_accum.pipeline.kubeflow.profiles import get_profile, load_profiles

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / ".venv" / "kfp-spec"
IMAGE = "europe-docker.pkg.dev/proj/repo/tfx-accum:0.1.0"
TFX_ENTRYPOINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
ARGS = dict(
    image=IMAGE,
    pipeline_root="gs://bucket/tfx-accum",
    data_root="gs://bucket/digits",
    search_space=SearchSpace(max_trials=3),
)


def compile_argv(pool: str, output: Path, *extra: str) -> list[str]:
    """``tfx-accum compile`` for ``pool`` with the test image and roots."""
    return [
        "compile", "--node-pool", pool, "--output", str(output), "--image", IMAGE,
        "--pipeline-root", ARGS["pipeline_root"], "--data-root", ARGS["data_root"], *extra,
    ]  # fmt: skip


def validate(path: Path) -> dict:
    """Strict parse with KFP's current protos, in their own isolated interpreter."""
    if not SPEC_DIR.is_dir():
        pytest.fail(f"{SPEC_DIR} is missing: run scripts/setup_env.sh")
    proc = subprocess.run(
        [
            sys.executable,
            "-S",
            str(ROOT / "kubeflow" / "image_tools" / "validate_spec.py"),
            str(path),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SPEC_DIR)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("kfp")
    files = {}
    for pool in ("gpu", "tpu"):
        rc = main(compile_argv(pool, out / f"{pool}.yaml", "--max-trials", "3"))
        assert rc == 0
        files[pool] = out / f"{pool}.yaml"
    files["vertex"] = compile_pipeline(
        node_pool="gpu", output=str(out / "vertex.json"), target="vertex", **ARGS
    )
    return files


@pytest.mark.parametrize("pool", ["gpu", "tpu"])
def test_kfp_yaml_parses_strictly_and_carries_the_node_pool(compiled, pool):
    summary = validate(compiled[pool])
    profile = get_profile(pool)
    assert summary["schema_version"] == "2.1.0"
    assert summary["format"] == "PipelineSpec YAML + platform spec"
    # No Resolver node: self-hosted KFP cannot run one.
    assert not [t for t in summary["tasks"] if "resolver" in t.lower()]
    assert {"CsvExampleGen", "Tuner", "Trainer", "Evaluator", "Pusher"} <= set(summary["tasks"])
    for label, executor in summary["executors"].items():
        assert executor["kind"] == "container", label
        assert executor["image"] == IMAGE, label
        assert executor["command"][-1].startswith("tfx.orchestration.kubeflow.v2"), label
    for name in ("Tuner", "Trainer"):
        executor = summary["executors"][f"{name}_executor"]
        assert executor["command"] == ["python", "-m", TFX_ENTRYPOINT]
        accelerator = executor["resources"]["accelerator"]
        assert accelerator["type"] == accelerator["resourceType"] == profile.resource_name
        assert int(accelerator["count"]) == int(accelerator["resourceCount"]) == profile.count
        assert executor["resources"]["resourceCpuLimit"] == f"{profile.cpu:g}"
        assert executor["resources"]["resourceMemoryLimit"] == profile.memory
        platform = summary["platform"][f"{name}_executor"]
        assert platform["nodeSelector"]["labels"] == profile.node_selector()
        assert platform["tolerations"] == [
            {
                "key": profile.resource_name,
                "operator": "Equal",
                "value": "present",
                "effect": "NoSchedule",
            }
        ]
    # Data components get modest resources and no accelerator or node pool.
    for name in ("CsvExampleGen", "StatisticsGen", "Evaluator", "Pusher"):
        resources = summary["executors"][f"{name}_executor"]["resources"]
        assert "accelerator" not in resources, name
        assert resources["resourceCpuLimit"] == "2" and resources["resourceMemoryLimit"] == "8G"
    assert set(summary["platform"]) == {"Tuner_executor", "Trainer_executor"}


def test_tpu_profile_selects_topology(compiled):
    platform = validate(compiled["tpu"])["platform"]["Trainer_executor"]
    assert platform["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
        "node.kubernetes.io/instance-type": "ct5lp-hightpu-4t",  # single-host slices only
    }


def test_vertex_job_uses_vertex_accelerator_names(compiled):
    summary = validate(compiled["vertex"])
    assert summary["format"] == "PipelineJob JSON"
    trainer = summary["executors"]["Trainer_executor"]["resources"]["accelerator"]
    assert trainer["type"] == trainer["resourceType"] == "NVIDIA_L4"
    assert summary["platform"] == {}


def test_the_pipeline_references_packaged_code_not_a_module_file(compiled):
    spec = next(yaml.safe_load_all(compiled["gpu"].read_text()))
    text = json.dumps(spec)
    assert (
        "tfx_accum.components.training.trainer_module.run_fn" in text
        and "tfx_accum.components.search.tuner_module.tuner_fn" in text
    )
    assert "module_file" not in text and "_wheels" not in text


@pytest.mark.parametrize("pool", ["gpu", "tpu"])
def test_tuner_and_trainer_are_retried_after_preemption(compiled, pool):
    spec = next(yaml.safe_load_all(compiled[pool].read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    for name in ("Tuner", "Trainer"):
        assert tasks[name]["retryPolicy"]["maxRetryCount"] >= 1, name
    assert "retryPolicy" not in tasks["CsvExampleGen"]


def test_beam_workers_follow_the_pod_not_the_node(compiled):
    text = compiled["gpu"].read_text()
    # direct_num_workers=0 would start one worker per CPU of the node; the data components'
    # pods have 2 CPUs, where Beam runs in-process (tfx_accum.pipeline.beam_args,
    # bench.beam_sizing).
    assert "direct_num_workers=1" in text and "direct_num_workers=0" not in text
    assert "direct_running_mode=in_memory" in text and BEAM_PLUGIN_ARG not in text


def test_shipped_profiles_include_common_shapes():
    profiles = load_profiles()
    assert {"gpu", "tpu", "a100x4", "h100x8", "tpu-v5e-2x4"} <= set(profiles)
    assert profiles["gpu"].kind == "gpu" and profiles["gpu"].gke_label == "nvidia-l4"
    assert profiles["tpu"].topology == "2x2" and profiles["tpu"].kind == "tpu"


def test_user_profiles_are_added(tmp_path):
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "l4x2:\n  accelerator: {kind: gpu, count: 2, gke_label: nvidia-l4}\n"
        "  cpu: 16\n  memory: 64G\n"
    )
    assert get_profile("l4x2", extra).count == 2
    assert "gpu" in load_profiles(extra)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(node_pool="v100"), "Unknown node pool 'v100'. Known profiles: a100x4, cpu, gpu"),
        (dict(pipeline_root="bucket/root"), "not a usable URI"),
        (dict(data_root="gs://"), "not a usable URI"),
        (dict(image="Not An Image"), "not a container image reference"),
        (dict(output="pipeline.json"), "must end in .yaml"),
        (dict(pipeline_root="s3://bucket/root"), "cannot read or write s3:// "),
        (dict(pipeline_root="minio://mlpipeline/v2"), "use gs://BUCKET/path"),
        (dict(node_pool="tpu", target="vertex", output="x.json"), "at most 96 CPUs"),
    ],
)
def test_bad_arguments_fail_clearly_and_write_nothing(tmp_path, kwargs, message):
    args = {**ARGS, "node_pool": "gpu", "output": str(tmp_path / "out.yaml"), **kwargs}
    if not args["output"].startswith("/"):
        args["output"] = str(tmp_path / args["output"])
    with pytest.raises(InputError, match=message):
        compile_pipeline(**args)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "profile,message",
    [
        ("accelerator: {kind: fpga, count: 1, gke_label: x}\ncpu: 1\nmemory: 1G", "gpu or tpu"),
        ("accelerator: {kind: tpu, count: 4, gke_label: tpu-v5}\ncpu: 1\nmemory: 1G", "topology"),
        (
            "accelerator: {kind: tpu, count: 4, gke_label: t, topology: 2x2}\ncpu: 1\nmemory: 1G",
            "need `machine_type`",
        ),
        ("accelerator: {kind: gpu, count: 0, gke_label: nvidia-l4}\ncpu: 1\nmemory: 1G", "count"),
        (
            "accelerator: {kind: gpu, count: 1, gke_label: nvidia-l4}\ncpu: 1\nmemory: lots",
            "memory",
        ),
    ],
)
def test_malformed_profile_lists_known_names(tmp_path, profile, message):
    extra = tmp_path / "pools.yaml"
    extra.write_text("broken:\n" + "".join(f"  {line}\n" for line in profile.splitlines()))
    with pytest.raises(InputError, match=message) as info:
        compile_pipeline(
            node_pool="gpu", output=str(tmp_path / "o.yaml"), profiles_file=str(extra), **ARGS
        )
    assert "Known profiles: a100x4, broken, cpu, gpu" in str(info.value)
    assert not (tmp_path / "o.yaml").exists()


def test_cli_reports_bad_profile_without_traceback(tmp_path, capsys):
    rc = main(
        [
            "compile",
            "--node-pool",
            "nope",
            "--output",
            str(tmp_path / "x.yaml"),
            "--image",
            IMAGE,
            "--pipeline-root",
            "gs://b/r",
            "--data-root",
            "gs://b/d",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "Unknown node pool 'nope'" in err and "gpu" in err
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize("pool", ["gpu", "tpu"])
def test_the_pipeline_root_travels_in_the_spec(compiled, pool):
    spec = next(yaml.safe_load_all(compiled[pool].read_text()))
    assert spec["defaultPipelineRoot"] == ARGS["pipeline_root"]


def test_tpu_selector_names_the_single_host_machine_type(compiled):
    _, platform = yaml.safe_load_all(compiled["tpu"].read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    labels = executors["Trainer_executor"]["nodeSelector"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "ct5lp-hightpu-4t"


def test_cpu_profile_compiles_without_accelerators(tmp_path):
    path = compile_pipeline(node_pool="cpu", output=str(tmp_path / "cpu.yaml"), **ARGS)
    spec, platform = yaml.safe_load_all(path.read_text())
    trainer = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    assert "accelerator" not in trainer["resources"]
    assert trainer["resources"]["cpuLimit"] == 4
    assert platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"] == {}
    validate(path)  # still strictly valid


def test_gpu_pods_are_told_what_the_profile_promised(compiled):
    spec = next(yaml.safe_load_all(compiled["gpu"].read_text()))
    for label in ("Trainer_executor", "Tuner_executor"):
        env = {
            e["name"]: e["value"]
            for e in spec["deploymentSpec"]["executors"][label]["container"]["env"]
        }
        assert env == {"TFX_ACCUM_ACCELERATOR": "gpu:1", "TFX_ACCUM_NODE_POOL": "gpu"}


def test_a_gpu_profile_on_a_machine_without_gpu_stops_with_the_cause(monkeypatch):
    from tfx_accum.components.accumulation.strategy import choose_strategy

    monkeypatch.setenv("TFX_ACCUM_ACCELERATOR", "gpu:1")
    monkeypatch.setenv("TFX_ACCUM_NODE_POOL", "gpu")
    with pytest.raises(RuntimeError) as info:
        choose_strategy()  # this machine has no GPU
    message = str(info.value)
    assert "Node pool 'gpu' promises 1 GPU(s), but TensorFlow sees 0" in message
    assert "/usr/local/nvidia/lib64" in message and "ACCELERATOR=cpu" in message
    monkeypatch.setenv("TFX_ACCUM_ACCELERATOR", "cpu:0")
    assert choose_strategy().num_replicas_in_sync == 1


def _tuner_module_config(path: Path):
    """The compiled Tuner's custom_config, read as the Tuner module reads it."""
    from tfx_accum.components import ModuleConfig

    spec = next(yaml.safe_load_all(path.read_text()))
    parameter = spec["root"]["dag"]["tasks"]["Tuner"]["inputs"]["parameters"]["custom_config"]
    return ModuleConfig.from_custom_config(json.loads(parameter["runtimeValue"]["constant"]))


@pytest.mark.parametrize(
    "pool,extra,expected",
    [
        ("a100x4", [], 4),
        ("h100x8", [], 8),
        ("gpu", [], 1),
        ("a100x4", ["--parallel-trials", "2"], 2),
    ],
)
def test_multi_gpu_profiles_run_one_trial_per_gpu(tmp_path, pool, extra, expected):
    output = tmp_path / f"{pool}.yaml"
    rc = main(compile_argv(pool, output, *extra))
    assert rc == 0
    assert _tuner_module_config(output).parallel_trials == expected
    assert get_profile(pool).tuner_parallel_trials == (4 if pool == "a100x4" else expected)


def test_parallel_trials_on_a_tpu_profile_is_refused(tmp_path):
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "tpu8:\n  accelerator: {kind: tpu, count: 8, gke_label: tpu-v5-lite-podslice, "
        "topology: 2x4}\n  machine_type: ct5lp-hightpu-8t\n  cpu: 100\n  memory: 100G\n"
        "  parallel_trials: 2\n"
    )
    with pytest.raises(InputError, match="parallel_trials` must be 1 on a TPU pool"):
        get_profile("tpu8", extra)


def test_example_gen_is_never_served_from_the_cache_on_kubeflow(compiled):
    """On KFP nothing fingerprints the data root: a cached ExampleGen would serve old data."""
    tasks = next(yaml.safe_load_all(compiled["gpu"].read_text()))["root"]["dag"]["tasks"]
    assert tasks["CsvExampleGen"]["cachingOptions"] == {"enableCache": False}
    assert tasks["Trainer"]["cachingOptions"] == {"enableCache": True}


def test_run_compiled_refuses_a_spec_for_accelerators(compiled, capfd):
    assert main(["run-compiled", str(compiled["gpu"])]) == 2
    message = capfd.readouterr().err
    assert "compiled for accelerators (gpu:1)" in message and "--node-pool cpu" in message
    assert main(["run-compiled", str(compiled["gpu"].with_name("missing.yaml"))]) == 2


def test_tfrecord_data_compiles_to_an_uncached_import_example_gen(tmp_path):
    """--data-format tfrecord: ImportExampleGen reads the data root, on every run."""
    output = tmp_path / "records.yaml"
    assert main(compile_argv("cpu", output, "--data-format", "tfrecord", "--model", "cnn")) == 0
    spec = next(yaml.safe_load_all(output.read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    assert "CsvExampleGen" not in tasks
    assert tasks["ImportExampleGen"]["cachingOptions"] == {"enableCache": False}
    assert (
        "ImportExampleGen"
        in tasks["StatisticsGen"]["inputs"]["artifacts"]["examples"]["taskOutputArtifact"][
            "producerTask"
        ]
    )


# --- run-time parameters ---

RUN_PARAMETERS = {
    "data_root": ("STRING", ARGS["data_root"]),
    "max_trials": ("NUMBER_INTEGER", 3),
    "tuning_epochs": ("NUMBER_INTEGER", 4),
    "train_steps": ("NUMBER_INTEGER", 300),
    "bless_threshold": ("NUMBER_DOUBLE", -1.0),  # none: only beat the trivial baseline
}
# Where each parameter goes: the task and the execution property it sets.
WIRING = {
    ("CsvExampleGen", "input_base"): "data_root",
    ("Tuner", "max_trials"): "max_trials",
    ("Tuner", "tuning_epochs"): "tuning_epochs",
    ("Trainer", "train_steps"): "train_steps",
    ("Evaluator", "bless_threshold"): "bless_threshold",
}


@pytest.mark.parametrize("pool", ["gpu", "vertex"])
def test_the_compiled_spec_declares_the_run_time_parameters(compiled, pool):
    path = compiled[pool]
    if pool == "vertex":  # schema 2.0.0: the older parameter types, defaults in the job too
        job = json.loads(path.read_text())
        spec = job["pipelineSpec"]
        legacy = {"NUMBER_INTEGER": "intValue", "NUMBER_DOUBLE": "doubleValue"}
        assert job["runtimeConfig"]["parameters"] == {
            name: {legacy.get(kind, "stringValue"): str(v) if kind == "NUMBER_INTEGER" else v}
            for name, (kind, v) in RUN_PARAMETERS.items()
        }
        kinds = {"INT": "NUMBER_INTEGER", "DOUBLE": "NUMBER_DOUBLE", "STRING": "STRING"}
    else:
        spec = next(yaml.safe_load_all(path.read_text()))
        kinds = {}
    declared = spec["root"]["inputDefinitions"]["parameters"]
    assert {
        name: (p.get("parameterType") or kinds[p["type"]], p["defaultValue"])
        for name, p in declared.items()
    } == RUN_PARAMETERS
    assert all(p["isOptional"] for p in declared.values())
    tasks = spec["root"]["dag"]["tasks"]
    for (task, prop), name in WIRING.items():
        assert tasks[task]["inputs"]["parameters"][prop] == {"componentInputParameter": name}
    # With the default --train-steps (the CLI's), the Trainer trains the best trial's budget,
    # which the Tuner's decision carries (a run's tuning_epochs reaches it that way).
    trainer = tasks["Trainer"]["inputs"]["parameters"]
    assert "tuning_epochs" not in trainer


def test_the_run_time_parameters_follow_the_compile_options(tmp_path):
    output = tmp_path / "no-tune.yaml"
    assert main(compile_argv("cpu", output, "--no-tune", "--train-steps", "50")) == 0
    spec = next(yaml.safe_load_all(output.read_text()))
    declared = spec["root"]["inputDefinitions"]["parameters"]
    # No Tuner: no max_trials or tuning_epochs to set.
    assert {n: p["defaultValue"] for n, p in declared.items()} == {
        "data_root": ARGS["data_root"],
        "train_steps": 50,
        "bless_threshold": -1.0,
    }
    assert "train_steps: 50" in output.read_text().splitlines()[2].replace("=", ": ")


def test_the_executors_put_a_runs_values_where_tfx_and_the_modules_read_them():
    from tfx_accum.pipeline import run_parameters as params

    tuner = params.tuner_properties(
        {"custom_config": json.dumps({"search_space": {"max_trials": 8, "tuning_epochs": 4}}),
         "max_trials": 20, "tuning_epochs": 2}
    )  # fmt: skip
    from tfx_accum.components import ModuleConfig

    space = ModuleConfig.from_custom_config(json.loads(tuner["custom_config"])).space
    assert (space.max_trials, space.tuning_epochs) == (20, 2)
    trainer = params.trainer_properties({"train_args": '{"num_steps": 300}', "train_steps": 1000})
    assert json.loads(trainer["train_args"]) == {"num_steps": 1000}

    import tensorflow_model_analysis as tfma
    from google.protobuf import json_format

    from tfx_accum.pipeline.evaluation import eval_config

    def accuracy_bound(properties):
        config = json_format.Parse(properties["eval_config"], tfma.EvalConfig())
        (metric,) = [
            m
            for spec in config.metrics_specs
            for m in spec.metrics
            if m.class_name == "SparseCategoricalAccuracy"
        ]
        return metric.threshold.value_threshold.lower_bound.value

    compiled = json_format.MessageToJson(eval_config("multiclass", "label", 10, "accuracy", 0.95))
    given = {"eval_config": compiled, "bless_metric": "accuracy"}
    assert accuracy_bound(params.evaluator_properties({**given, "bless_threshold": 0.5})) == 0.5
    # No threshold (a negative value, the default without --bless-threshold): as compiled.
    assert accuracy_bound(params.evaluator_properties({**given, "bless_threshold": -1.0})) == 0.95
    # A run's bad value stops the task with the parameter's name.
    with pytest.raises(ValueError, match="run-time parameter `max_trials` must be an int >= 1"):
        params.tuner_properties(
            {"custom_config": json.dumps({"search_space": {}}), "max_trials": 0}
        )
    with pytest.raises(ValueError, match="run-time parameter bless_threshold: .* outside"):
        params.evaluator_properties({**given, "bless_threshold": 1.5})


def test_a_local_pipeline_takes_plain_values():
    from tfx.orchestration import data_types

    from tfx_accum.pipeline.pipeline import create_pipeline

    pipeline = create_pipeline("p", "/r", "/d", "/s", train_steps=42)
    for component in pipeline.components:
        assert not [
            v for v in component.exec_properties.values()
            if isinstance(v, data_types.RuntimeParameter)
        ], component.id  # fmt: skip
    trainer = next(c for c in pipeline.components if c.id == "Trainer")
    assert trainer.exec_properties["train_steps"] == 42


# --- parallel trials: one GPU per worker ---


def test_a_multi_gpu_pod_gives_each_worker_its_own_gpu(tmp_path):
    """What the a100x4 spec asks for, and how its Tuner pod shares the GPUs out."""
    from tfx_accum.components.search.parallel_search import GpuSlots, plan_workers

    output = tmp_path / "a100x4.yaml"
    assert main(compile_argv("a100x4", output)) == 0
    spec = next(yaml.safe_load_all(output.read_text()))
    requested = _tuner_module_config(output).parallel_trials
    env = {
        e["name"]: e["value"]
        for e in spec["deploymentSpec"]["executors"]["Tuner_executor"]["container"]["env"]
    }
    gpus = int(env["TFX_ACCUM_ACCELERATOR"].split(":")[1])
    workers, why = plan_workers(requested, trials_left=8, gpus=gpus, cpus=46)
    assert (requested, gpus, workers, why) == (4, 4, 4, None)
    slots = GpuSlots(gpus)
    assert sorted(slots.take(i) for i in range(workers)) == [0, 1, 2, 3]


def test_more_parallel_trials_than_gpus_are_refused_at_compile_time(tmp_path, capsys):
    output = tmp_path / "x.yaml"
    assert main(compile_argv("a100x4", output, "--parallel-trials", "8")) == 2
    assert "--parallel-trials 8 is more than the 4 GPU(s) of node pool 'a100x4'" in (
        capsys.readouterr().err
    )
    assert not output.exists()
    extra = tmp_path / "pools.yaml"
    extra.write_text(
        "l4x2:\n  accelerator: {kind: gpu, count: 2, gke_label: nvidia-l4}\n"
        "  cpu: 16\n  memory: 64G\n  parallel_trials: 3\n"
    )
    with pytest.raises(InputError, match="parallel_trials` 3 is more than the pool's 2 GPU"):
        get_profile("l4x2", extra)


# --- the guide's commands are the ones the tests run ---

GUIDE = ROOT / "kubeflow" / "README.md"


def _guide_commands(program: str) -> list[list[str]]:
    """The guide's shell commands that start with ``program``, continuation lines joined."""
    import re
    import shlex

    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), re.S)
    commands = []
    for block in blocks:
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split("  #")[0].strip()
            words = shlex.split(line.split(" # ")[0]) if line else []
            while words and "=" in words[0] and not words[0].startswith("-"):
                words = words[1:]  # VAR=value prefixes
            if words[:1] == [program] or words[:1] == [f"${program.upper()}"]:
                commands.append(words)
    return commands


def test_the_guides_tfx_accum_commands_parse_as_the_tests_run_them():
    from tfx_accum.pipeline.cli.parser import build_parser

    commands = _guide_commands("tfx-accum")
    kinds = {words[1] for words in commands}
    assert {"compile", "run-compiled"} <= kinds, kinds
    parser = build_parser()
    for words in commands:
        if "..." in words:
            continue  # an elided example
        args = parser.parse_args(words[1:])
        if args.command == "run-compiled":
            # As tests/kubeflow/test_kubeflow_local.py runs it: the image's python and WORKDIR.
            assert args.image_python and args.workdir, words
            names = {p.split("=")[0] for p in args.parameters}
            assert names <= set(RUN_PARAMETERS), names


def test_the_guides_kfp_run_parameters_are_the_specs():
    runs = [w for w in _guide_commands("kfp") if "run" in w and "create" in w]
    assert runs
    names = {w.split("=")[0] for words in runs for w in words if "=" in w and w[0] != "-"}
    assert names and names <= set(RUN_PARAMETERS), names


def test_run_compiled_refuses_a_parameter_the_spec_does_not_declare(tmp_path, capfd):
    spec = tmp_path / "local.yaml"
    argv = [
        "compile", "--node-pool", "cpu", "--output", str(spec), "--image", IMAGE,
        "--pipeline-root", str(tmp_path / "root"), "--data-root", str(tmp_path / "data"),
    ]  # fmt: skip
    assert main(argv) == 0
    assert main(["run-compiled", str(spec), "max_trail=4"]) == 2
    message = capfd.readouterr().err
    assert "no run-time parameter 'max_trail'; it has: bless_threshold, data_root" in message
    assert main(["run-compiled", str(spec), "max_trials"]) == 2  # not NAME=VALUE
    assert not (tmp_path / "root").exists()  # nothing ran
