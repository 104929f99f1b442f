"""Each broker adapter stands alone (docs/adr/0019-brokers.md): ``outbox_adapters.brokers.nats``
imports nats-py and never aiokafka, ``outbox_adapters.brokers.kafka`` the other way round, each
translates its exceptions with its own error map, and ``outbox_adapters.brokers`` imports neither
library until a name or a URL asks for one.

Imports are checked in a fresh interpreter: once with both libraries installed (the other one must
stay out of ``sys.modules``), once with the other one blocked (as when its extra is missing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from outbox_adapters import brokers
from outbox_adapters.brokers import BrokerUrl
from outbox_adapters.brokers import errors as shared
from outbox_adapters.brokers.kafka import errors as kafka_errors
from outbox_adapters.brokers.nats import errors as nats_errors
from outbox_core.outcomes import OutcomeKind

#: package -> (the library it imports, the other library and the other adapter package)
PACKAGES = {
    "outbox_adapters.brokers.nats": ("nats", ("aiokafka", "outbox_adapters.brokers.kafka")),
    "outbox_adapters.brokers.kafka": ("aiokafka", ("nats", "outbox_adapters.brokers.nats")),
}

#: Imports ``package`` and every module in it, uses its error map, and prints what got imported.
PROBE = """
import importlib, json, pkgutil, sys
for name in {blocked!r}:
    sys.modules[name] = None  # import raises ModuleNotFoundError, as if not installed
package = importlib.import_module({package!r})
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    importlib.import_module(info.name)
errors = importlib.import_module({package!r} + ".errors")
outcome = errors.publish_outcome(TimeoutError(), "orders", sending=True)
said = errors.describe(OSError("refused"))
print(json.dumps({{
    "modules": sorted(m for m in sys.modules if sys.modules[m] is not None),
    "outcome": [outcome.kind.value, outcome.maybe_delivered],
    "said": said,
}}))
"""


def _probe(package: str, blocked: tuple[str, ...] = ()) -> dict[str, Any]:
    code = PROBE.format(package=package, blocked=blocked)
    done = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _top_level(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_broker_package_imports_its_library_and_never_the_others(package):
    own, others = PACKAGES[package]
    found = _probe(package)
    assert own in _top_level(found["modules"])
    for other in others:
        assert not any(m == other or m.startswith(other + ".") for m in found["modules"]), other
    assert found["outcome"] == ["transient", True]
    assert found["said"] == "OSError: refused"


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_broker_package_works_with_the_other_library_missing(package):
    _own, others = PACKAGES[package]
    found = _probe(package, blocked=(others[0],))
    assert found["outcome"] == ["transient", True]


def test_the_brokers_package_imports_neither_library_nor_adapter():
    code = textwrap.dedent(
        """
        import json, sys
        import outbox_adapters.brokers
        from outbox_adapters.brokers import BrokerUnavailable, BrokerUrl, require_broker
        from outbox_adapters.brokers import errors, urls, embedded
        BrokerUrl.parse("nats://127.0.0.1:4222"), BrokerUrl.parse("kafka://127.0.0.1:9092")
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout)
    assert _top_level(modules).isdisjoint({"nats", "aiokafka"})
    assert not [m for m in modules if m.startswith(tuple(PACKAGES))]


def test_the_lazy_names_and_the_url_adapter_come_from_the_broker_packages():
    for name in ("NatsBroker", "NatsConsumer", "NatsPublisher"):
        assert getattr(brokers, name).__module__.startswith("outbox_adapters.brokers.nats.")
    for name in ("KafkaBroker", "KafkaConsumer", "KafkaPublisher", "KafkaClientConfig"):
        assert getattr(brokers, name).__module__.startswith("outbox_adapters.brokers.kafka.")
    for url, package in (("tls://h:4222", "nats"), ("kafkas://h:9093", "kafka")):
        adapter = brokers._adapter(BrokerUrl.parse(url))
        assert adapter.__name__ == f"outbox_adapters.brokers.{package}"
    with pytest.raises(AttributeError, match="RabbitBroker"):
        _ = brokers.RabbitBroker


def test_each_adapter_applies_its_own_error_map_only():
    assert list(nats_errors.ERRORS.maps) == [nats_errors.ERROR_MAP]
    assert list(kafka_errors.ERRORS.maps) == [kafka_errors.ERROR_MAP]
    # A Kafka refusal is no NATS error: the NATS adapter lets it propagate, as a bug of its own.
    refusal = kafka_errors.ERROR_MAP.errors[0]()
    assert nats_errors.publish_outcome(refusal, "orders") is None
    assert not nats_errors.is_broker_error(refusal)
    # The shared functions apply every installed map.
    assert set(shared.installed().maps) == {nats_errors.ERROR_MAP, kafka_errors.ERROR_MAP}
    outcome = shared.publish_outcome(refusal, "orders")
    assert outcome is not None
    assert outcome.kind is OutcomeKind.TRANSIENT
