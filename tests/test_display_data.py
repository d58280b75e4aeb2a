"""Display data of the Beam stack: every public PTransform of ``transforms/`` (found by walking the
package, not listed here) names its task in ``display_data()``, and so does every public DoFn and
CombineFn built from a task. Transforms are only constructed, never run."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.transforms.display import DisplayData

import transforms
from ldp.aggregate import make_aggregator
from ldp.anonymity import AnonymitySettings
from ldp.task import WindowConfig, parse_task
from transforms.aggregate import Aggregate
from transforms.display import window_text

TASK = parse_task(
    {
        "task_id": "display-1",
        "mechanism": "olh",
        "epsilon": 1.5,
        "domain_size": 16,
        "budget": {"reports_per_period": 2, "period_s": 60, "client_ids": True},
    }
)
AGG = make_aggregator(TASK)
WINDOW = WindowConfig(size_s=600.0, allowed_lateness_s=30.0, early_firing_s=10.0)

#: a value for each constructor parameter the stack's transforms take (by name); a transform with a
#: required parameter missing here fails the test, naming it
SAMPLES: dict[str, Any] = {
    "aggregator": AGG,
    "task": TASK,
    "task_id": TASK.task_id,
    "window": WINDOW,
    "file_pattern": "/data/reports/*.avro",
    "output_dir": "/data/out",
    "spec": AGG.outputs[0],
    "source": "projects/p/subscriptions/reports",
    "url": "postgresql://ldp:secret@127.0.0.1:5432/ldp",
    "streaming": True,
    "settings": AnonymitySettings(),
    "schema_version": TASK.schema_version,
    "interval_s": 10.0,
    "lag_s": 1.0,
    "window_s": 60.0,
    "expansion_service": "127.0.0.1:8097",
    "granule_ms": 1000,
    "accumulating": False,
}
#: parameters that name the task: passed whenever a constructor takes them, required or not
TASK_PARAMS = ("aggregator", "task", "task_id")


def _public_classes(base: type) -> list[type]:
    found: dict[str, type] = {}
    for info in pkgutil.iter_modules(transforms.__path__):
        module = importlib.import_module(f"transforms.{info.name}")
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, base)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                found[f"{module.__name__}.{name}"] = obj
    return [found[k] for k in sorted(found)]


def _construct(cls: type) -> Any:
    kwargs: dict[str, Any] = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name in TASK_PARAMS and name in SAMPLES:
            kwargs[name] = SAMPLES[name]
        elif p.default is inspect.Parameter.empty:
            assert name in SAMPLES, f"{cls.__name__}({name}=...): add a sample value for {name!r}"
            kwargs[name] = SAMPLES[name]
    return cls(**kwargs)


def _items(obj: Any) -> dict[str, Any]:
    """The display items of ``obj`` itself (not of nested components), by key."""
    dd = DisplayData.create_from(obj)
    return {i.key: i.value for i in dd.items if i.namespace == dd.namespace}


def _takes_task(cls: type) -> bool:
    return any(p in inspect.signature(cls.__init__).parameters for p in TASK_PARAMS)


PTRANSFORMS = _public_classes(beam.PTransform)
FNS = [c for c in _public_classes(beam.DoFn) + _public_classes(beam.CombineFn) if _takes_task(c)]


def test_the_walk_finds_the_stack():
    names = {c.__name__ for c in PTRANSFORMS}
    assert {"Aggregate", "ReadReportFiles", "WatchReportFiles", "WriteResults", "WriteToStore"} <= names
    assert {"ValidateFn", "TaskCombineFn", "FinalizeFn"} <= {c.__name__ for c in FNS}


@pytest.mark.parametrize("cls", PTRANSFORMS, ids=lambda c: c.__name__)
def test_every_public_ptransform_names_its_task(cls):
    assert _takes_task(cls), f"{cls.__name__} takes no task, aggregator or task_id"
    items = _items(_construct(cls))
    assert items.get("task_id") == TASK.task_id, f"{cls.__name__}: {items}"
    if {"aggregator", "task"} & set(inspect.signature(cls.__init__).parameters):
        assert (items["kind"], items["mechanism"], items["epsilon"]) == ("frequency", "olh", 1.5)


@pytest.mark.parametrize("cls", FNS, ids=lambda c: c.__name__)
def test_every_public_fn_built_from_a_task_names_it(cls):
    items = _items(_construct(cls))
    assert items.get("task_id") == TASK.task_id, f"{cls.__name__}: {items}"


def test_the_display_data_shows_window_paths_and_topics_without_secrets():
    from transforms.io import DecodeReportMessages, WriteResults
    from transforms.store import WriteToStore

    agg = _items(Aggregate(AGG, WINDOW))
    assert agg["window"] == "fixed 600 s, early panes every 10 s, allowed lateness 30 s"
    assert agg["groups"] == TASK.n_groups
    out = _items(WriteResults("/data/out", AGG.outputs[0], task_id=TASK.task_id))
    assert out["output"] == AGG.outputs[0].name and out["path"].startswith("/data/out")
    assert _items(DecodeReportMessages(SAMPLES["source"], AGG))["source"] == SAMPLES["source"]
    store = _items(WriteToStore(SAMPLES["url"], TASK, WINDOW, streaming=True))
    assert "secret" not in store["store"] and store["store"].startswith("postgresql://ldp:")


def test_window_text():
    assert window_text(WindowConfig()) == "global"
    assert window_text(WindowConfig(size_s=60, period_s=10, accumulating=True)) == (
        "sliding 60 s every 10 s, accumulating"
    )


def _proto_display(pipeline: beam.Pipeline) -> dict[str, dict[str, Any]]:
    """The display data the runner receives (the pipeline proto), by step name and key."""
    from apache_beam.portability.api import beam_runner_api_pb2 as pb

    out: dict[str, dict[str, Any]] = {}
    for t in pipeline.to_runner_api().components.transforms.values():
        items = [pb.LabelledPayload.FromString(dd.payload) for dd in t.display_data]
        out[t.unique_name] = {lp.key: getattr(lp, lp.WhichOneof("value")) for lp in items}
    return out


def test_the_runner_receives_the_task_in_every_step_of_the_aggregate():
    p = beam.Pipeline()
    _ = p | beam.Create([]) | "Aggregate" >> Aggregate(AGG, WINDOW, drop_late=False)
    steps = _proto_display(p)
    for name in (
        "Aggregate",
        "Aggregate/Validate/ParDo(ValidateFn)",
        "Aggregate/Budget",
        "Aggregate/Budget/Count/ParDo(BudgetStateFn)",
        "Aggregate/Window",
        "Aggregate/Combine",
        "Aggregate/Finalize/ParDo(FinalizeFn)",
    ):
        assert steps[name]["task_id"] == TASK.task_id, (name, steps[name])
    assert steps["Aggregate/Validate/ParDo(ValidateFn)"]["epsilon"] == 1.5
