"""The Pusher, publishing the model atomically: a model server never sees half a model.

TFX's Pusher copies the model file by file straight into ``<base>/<version>/`` (with
``saved_model.pb`` last). A run stopped during the copy (a full disk, a kill) leaves a
version directory without ``saved_model.pb`` or with a partial variables file, and a model
server watching ``<base>`` loads the highest version it finds. Here TFX's executor copies
into a temporary directory beside the versions, ``<base>/.incoming-<version>-<random>/``
(a name no model server takes for a version: they are numbers), which is renamed to
``<base>/<version>`` only when the whole model is there. On a local filesystem the rename
is atomic, so ``<version>`` is complete or absent; on an object store (``gs://``) the
rename copies object by object, and the temporary prefix still keeps a partial copy from
ever being written under the version's name. A failed copy removes the temporary directory;
one left by a push that was killed (SIGKILL: no cleanup runs) is removed by the next push
from this machine, once the process that wrote it is gone (its name holds the host and the
process id); another machine's is left alone until it is a day old.

Extended the public way TFX offers: a subclass of the Pusher component whose
``EXECUTOR_SPEC`` names this module's executor (as TFX's own Vertex AI Pusher does), so the
dotted path ``tfx_accum.components.training.pusher.Executor`` runs on Kubeflow too.

The version a push is published under is newer than every version already there
(:func:`~tfx_accum.components.training.serving_versions.next_version`): TFX names it by
the Unix time, and two pushes in the same second, or after a version from a clock ahead,
would otherwise land in an existing version (TFX then skips the copy but still records
the push there) or below the version a server loads.
"""

from __future__ import annotations

from tfx_accum import needs_tfx  # noqa: F401 - first: without the tfx extra, one line

# isort: split
import contextlib
import os
import socket
import time
import uuid
from typing import Any

from tfx import types
from tfx.components.pusher import component as pusher_component
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from tfx_accum.atomic_files import raise_if_disk_full
from tfx_accum.components.training.serving_versions import next_version

STAGING_PREFIX = ".incoming-"
STALE_SECONDS = 24 * 3600  # another machine's staging directory this old is abandoned


def _host() -> str:
    """This machine's name as a staging directory's name holds it (no ``-``: the separator)."""
    return socket.gethostname().replace("-", "_")


def _staging_name() -> str:
    return f"{STAGING_PREFIX}{_host()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_abandoned_staging(base: str) -> list[str]:
    """Removes the staging directories under ``base`` whose push can no longer finish."""
    if not fileio.isdir(base):
        return []
    host = _host()
    removed = []
    for name in fileio.listdir(base):
        name = name.rstrip("/")
        if not name.startswith(STAGING_PREFIX):
            continue
        path = os.path.join(base, name)
        parts = name[len(STAGING_PREFIX) :].split("-")
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit():
            abandoned = not _alive(int(parts[1]))
        else:  # another machine's, or an older name: by age
            try:
                age = time.time() - fileio.stat(path).mtime_nsec / 1e9
            except Exception:  # noqa: BLE001 - gone meanwhile, or unreadable: left alone
                continue
            abandoned = age > STALE_SECONDS
        if abandoned:
            with contextlib.suppress(Exception):
                fileio.rmtree(path)
                removed.append(path)
    return removed


class Executor(pusher_executor.Executor):
    """TFX's Pusher executor, with the model staged beside its version and renamed in."""

    def Do(
        self,
        input_dict: dict[str, list[types.Artifact]],
        output_dict: dict[str, list[types.Artifact]],
        exec_properties: dict[str, Any],
    ) -> None:
        key = standard_component_specs.PUSH_DESTINATION_KEY
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(exec_properties[key], destination)
        if destination.WhichOneof("destination") != "filesystem":
            return super().Do(input_dict, output_dict, exec_properties)
        base = destination.filesystem.base_directory
        remove_abandoned_staging(base)
        staging = os.path.join(base, _staging_name())
        destination.filesystem.base_directory = staging
        staged = {**exec_properties, key: proto_utils.proto_to_json(destination)}
        pushed = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY]
        )
        try:
            super().Do(input_dict, output_dict, staged)  # copies into <staging>/<version>
            if not pushed.get_int_custom_property("pushed"):
                return  # not blessed: nothing was copied
            staged_version = pushed.get_string_custom_property("pushed_version")
            existing = fileio.listdir(base) if fileio.isdir(base) else []
            version = next_version(existing, staged_version)
            final = os.path.join(base, version)
            try:
                fileio.rename(os.path.join(staging, staged_version), final)
            except Exception as error:
                raise_if_disk_full(error, final)
                raise
            pushed.set_string_custom_property("pushed_version", version)
            pushed.set_string_custom_property("pushed_destination", final)
        except Exception as error:
            raise_if_disk_full(error, base)
            raise
        finally:
            with contextlib.suppress(Exception):
                if fileio.exists(staging):
                    fileio.rmtree(staging)


class Pusher(pusher_component.Pusher):
    """``tfx.components.Pusher`` that publishes the model atomically (see module doc)."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
