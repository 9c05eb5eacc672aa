"""The installed package: what it holds, and the checkout's root folder beside it.

- Every module pyproject.toml installs is used by the installed package: imported or named
  by another installed module, an entry point, or run as a program (tests/installed_modules.py);
  the image tools, the docs generators and the like stay in the checkout.
- From the repository's root, where Python imports the checkout's ``tfx_accum/`` folder
  before any installed copy, ``import tfx_accum.components`` works with an editable
  install and with a regular one (the subpackages live beside that folder, mapped by
  ``package-dir``). In fresh processes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from installed_modules import checkout_modules, unused

ROOT = Path(__file__).resolve().parents[2]

# Where the editable install's finder is taken out, the packages are found as a regular
# install has them: in a site folder on sys.path, after the working directory.
REGULAR = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                    and "editable" not in getattr(f, "__name__", "").lower()]
sys.path.insert(1, sys.argv[1])
"""
IMPORT = """
import tfx_accum, tfx_accum.components, tfx_accum.pipeline.cli.parser, tfx_accum.kubeflow
print(tfx_accum.__file__)
print(tfx_accum.components.__file__)
"""


def test_every_installed_module_is_used_by_the_installed_package():
    modules = checkout_modules()
    assert "tfx_accum.components.accumulation.model" in modules  # the mapping is read
    assert not unused(modules), (
        "installed, yet nothing installed imports them (move them out of the packages "
        f"pyproject.toml lists, or use them): {unused(modules)}"
    )


def _installed_copy(site: Path) -> None:
    """The packages as a regular install lays them out (tfx_accum/components/...)."""
    shutil.copytree(ROOT / "tfx_accum", site / "tfx_accum")
    for folder in ("components", "pipeline", "kubeflow"):
        shutil.copytree(ROOT / folder, site / "tfx_accum" / folder)


@pytest.mark.parametrize("install", ["editable", "regular"])
def test_the_subpackages_import_from_the_repository_root(install, tmp_path):
    code = IMPORT
    args = []
    if install == "regular":
        _installed_copy(tmp_path / "site")
        code, args = REGULAR + IMPORT, [str(tmp_path / "site")]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    package, components = proc.stdout.split()[-2:]
    # The checkout's tfx_accum/ is the one imported (the case), its subpackages found.
    assert Path(package) == ROOT / "tfx_accum" / "__init__.py"
    assert Path(components).parent.name == "components"
