"""The generated module of an elementwise kernel, by its catalog key."""

from __future__ import annotations

import importlib
from types import ModuleType


def generated(key: str) -> ModuleType:
    """``kernels/_generated/<key>.py``, the loops behind ``kernels.<module>``."""
    return importlib.import_module(f"kernels._generated.{key}")
