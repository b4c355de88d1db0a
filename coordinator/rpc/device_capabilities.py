"""Whether a joining device can do what this run requires, from its JoinRequest.capabilities.

A device that names its `runtime` (protocol 1.7; a browser sends `runtime=web`) declares its
abilities completely: `codecs` lists the update codecs it encodes and `secagg_schemes` the secure-
aggregation schemes it computes (none listed: none). Such a device is refused at Join with
FAILED_PRECONDITION naming what it lacks when the run uses secure aggregation and it computes no
scheme this build runs, or when the run configures update codecs (`codecs`) and the device
encodes none of them (a run configured with only `topk` asks for top-k with error feedback, which
a device that does not list topk does not do). A device that names no runtime (the Python edge
client, older devices) is taken as before: it computes every scheme and codec of its version.
"""

from __future__ import annotations

from collections.abc import Mapping

from fedort.common.errors import CapabilityError
from fedort.common.secagg.scheme import CAPABILITY as SECAGG_SCHEMES
from fedort.common.secagg.scheme import SUPPORTED
from fedort.coordinator.aggregation.decode import family
from fedort.coordinator.config import CoordinatorConfig

RUNTIME = "runtime"
CODECS = "codecs"


def _listed(capabilities: Mapping[str, str], key: str) -> list[str]:
    return [s.strip() for s in capabilities.get(key, "").split(",") if s.strip()]


def missing_capabilities(config: CoordinatorConfig, capabilities: Mapping[str, str]) -> list[str]:
    """What this run requires that the device's declared capabilities lack (empty: it may join)."""
    runtime = capabilities.get(RUNTIME, "")
    if not runtime:
        return []
    missing = []
    if config.privacy.secagg and not set(_listed(capabilities, SECAGG_SCHEMES)) & set(SUPPORTED):
        missing.append(
            f"secure aggregation (this run masks every update; it computes one of {list(SUPPORTED)}, "
            f"the device lists {SECAGG_SCHEMES}={capabilities.get(SECAGG_SCHEMES, '')!r})"
        )
    wanted = {family(c) for c in config.uploads.codecs} - {"raw"}
    if wanted and not config.privacy.secagg:
        has = {family(c) for c in _listed(capabilities, CODECS)}
        if not wanted & has:
            what = "top-k updates with error feedback" if wanted == {"topk"} else "an update codec of this run"
            missing.append(
                f"{what} (codecs {sorted(wanted)}; the device lists {CODECS}={capabilities.get(CODECS, '')!r})"
            )
    return missing


def check_capabilities(config: CoordinatorConfig, capabilities: Mapping[str, str]) -> None:
    """CapabilityError (FAILED_PRECONDITION) naming everything the device lacks for this run."""
    missing = missing_capabilities(config, capabilities)
    if missing:
        raise CapabilityError(
            f"this {capabilities.get(RUNTIME)} device cannot take part in this run: it lacks " + "; ".join(missing)
        )


__all__ = ["CODECS", "RUNTIME", "check_capabilities", "missing_capabilities"]
