"""One broker: the queues it serves and everything around their commit loops.

:class:`~broker.service.broker.Broker` owns a
:class:`~broker.service.served_queue.ServedQueue` per queue it serves (the
commit loop and its target, the archiver); :mod:`~broker.service.takeover`
and :mod:`~broker.service.ownership` decide which queues those are;
:mod:`~broker.service.staging` keeps Spark's staged chunks;
:mod:`~broker.service.metrics` counts. Imports the model, the commit loop,
storage and the leaves; nothing of HTTP.
"""

from broker.service.broker import Broker
from broker.service.config import BrokerConfig

__all__ = ["Broker", "BrokerConfig"]
