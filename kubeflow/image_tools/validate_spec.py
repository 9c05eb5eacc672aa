"""Strictly validates a compiled tfx-accum pipeline file against KFP's own protos.

Parses the pipeline spec into ``kfp.pipeline_spec.pipeline_spec_pb2.PipelineSpec`` (and,
for Vertex files, the ``PipelineJob``), and every executor of the Kubernetes platform-spec
document into ``kfp.kubernetes``' ``KubernetesExecutorConfig``, rejecting unknown fields.
It uses the protos of the current KFP release (2.17), which TFX 1.16's pinned KFP SDK
predates, so it runs against its own small set of packages, isolated from the project's:

    pip install --no-deps --target .venv/kfp-spec -r kubeflow/validate-requirements.txt
    PYTHONPATH=.venv/kfp-spec python -S tfx_accum.kubeflow.image_tools.validate_spec tfx_accum.yaml

Prints a JSON summary of what it parsed; exits 1 with the reason when parsing fails.
"""

import importlib.util
import json
import os
import sys


def _kubernetes_executor_config_class():
    # Import the generated module by path: kfp.kubernetes/__init__ needs the full KFP SDK.
    for base in sys.path:
        path = os.path.join(base, "kfp", "kubernetes", "kubernetes_executor_config_pb2.py")
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("kubernetes_executor_config_pb2", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module.KubernetesExecutorConfig
    raise SystemExit("kfp-kubernetes is not on PYTHONPATH; see this file's docstring.")


def validate(path):
    import yaml
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    with open(path) as handle:
        text = handle.read()
    summary = {"file": path, "executors": {}, "platform": {}}
    if path.endswith(".json"):
        job = json.loads(text)
        json_format.ParseDict(job, pipeline_spec_pb2.PipelineJob(), ignore_unknown_fields=False)
        spec_dict, platform = job["pipelineSpec"], None
        summary["format"] = "PipelineJob JSON"
    else:
        documents = list(yaml.safe_load_all(text))
        if len(documents) != 2:
            raise ValueError(f"expected 2 YAML documents, found {len(documents)}")
        spec_dict, platform = documents
        summary["format"] = "PipelineSpec YAML + platform spec"
    spec = json_format.ParseDict(
        spec_dict, pipeline_spec_pb2.PipelineSpec(), ignore_unknown_fields=False
    )
    summary["schema_version"] = spec.schema_version
    summary["pipeline_name"] = spec.pipeline_info.name
    summary["tasks"] = sorted(spec.root.dag.tasks)
    for label, executor in spec.deployment_spec.fields["executors"].struct_value.fields.items():
        data = json_format.MessageToDict(executor.struct_value)
        summary["executors"][label] = {
            "kind": "container" if "container" in data else sorted(data),
            "image": data.get("container", {}).get("image"),
            "command": data.get("container", {}).get("command"),
            "resources": data.get("container", {}).get("resources"),
        }
    if platform is not None:
        platform_spec = json_format.ParseDict(
            platform, pipeline_spec_pb2.PlatformSpec(), ignore_unknown_fields=False
        )
        config_class = _kubernetes_executor_config_class()
        kubernetes = platform_spec.platforms["kubernetes"].deployment_spec
        for label, struct in kubernetes.executors.items():
            config = json_format.ParseDict(
                json_format.MessageToDict(struct), config_class(), ignore_unknown_fields=False
            )
            summary["platform"][label] = json_format.MessageToDict(config)
    return summary


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: validate_spec.py PIPELINE_FILE")
    try:
        print(json.dumps(validate(sys.argv[1]), indent=2, sort_keys=True))
    except Exception as error:  # noqa: BLE001 - the reason is the output
        print(f"INVALID: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
