"""The installed package: what it holds.

- Every module pyproject.toml installs is used by the installed package: imported or named
  by another installed module, an entry point, or run as a program (tests/installed_modules.py);
  the image tools, the docs generators and the like stay in the checkout.
"""

from __future__ import annotations

from installed_modules import checkout_modules, unused


def test_every_installed_module_is_used_by_the_installed_package():
    modules = checkout_modules()
    assert "tfx_accum.components.accumulation.model" in modules  # the mapping is read
    assert not unused(modules), (
        "installed, yet nothing installed imports them (move them out of the packages "
        f"pyproject.toml lists, or use them): {unused(modules)}"
    )
