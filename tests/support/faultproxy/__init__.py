"""An HTTP reverse proxy in front of an S3 API (moto) that injects seeded
faults: :class:`FaultProxy` in this process, :class:`RemoteControl` for one in
another, ``python -m tests.support.faultproxy`` to run one on its own. The
fault kinds, counters and control endpoint are described in
:mod:`tests.support.faultproxy.proxy`."""

from tests.support.faultproxy.control import RemoteControl
from tests.support.faultproxy.proxy import (
    CONTROL_PREFIX,
    COUNTED,
    KINDS,
    FaultConfig,
    FaultProxy,
    default_weights,
    parse_weights,
)

__all__ = ["CONTROL_PREFIX", "COUNTED", "KINDS", "FaultConfig", "FaultProxy", "RemoteControl",
           "default_weights", "parse_weights"]
