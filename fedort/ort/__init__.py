"""ONNX Runtime's training API behind fedort's own classes: artifacts, manifest, training session, built-in models.

Importing this package registers the torch-free `onnxruntime.training` package (see `_training_api.py`)
before any of fedort's modules imports `onnxruntime`; the device side and the coordinator's export both
come through here.
"""

from __future__ import annotations

import contextlib

from fedort.ort import _training_api

with contextlib.suppress(ImportError):  # a missing ORT is reported where it is used, with its fix
    _training_api.install_bare_training_package()
