"""The settings a test adds to every client of a script: `SLUICE_CLIENT_CONFIG` (librdkafka
keys as JSON, e.g. a secured cluster's security.protocol, CA and SASL login), merged under
each client's own settings.

    Producer, Consumer, AdminClient = with_client_config(Producer, Consumer, AdminClient)
"""
import json
import os

EXTRA = json.loads(os.environ.get("SLUICE_CLIENT_CONFIG") or "{}")


def _wrapped(cls):
    if not EXTRA:
        return cls

    class WithClientConfig(cls):
        def __init__(self, config, **kwargs):
            super().__init__({**EXTRA, **config}, **kwargs)

    WithClientConfig.__name__ = cls.__name__
    return WithClientConfig


def with_client_config(*classes):
    return tuple(_wrapped(cls) for cls in classes)
