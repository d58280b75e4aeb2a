"""Every registered mechanism with the wire spec it declares beside its payload.

The mechanism registries of the numpy core (frequency oracles, memoized oracles, numeric and sparse
mechanisms, range methods) are walked here, never copied: :func:`byte_mechanisms` lists the mechanisms of a
byte procedure (what the conformance vectors and the tests iterate), :func:`client_mechanisms` those a
client implementation (the TypeScript one) encodes, and :func:`wire_problems` names each registered
mechanism that declares neither a byte procedure with its vectors nor the reason it has none.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ldp import kinds
from ldp.payload import WireSpec, declared_wire

__all__ = ["Registered", "kind_registries", "registries", "registered_mechanisms", "byte_mechanisms",
           "client_mechanisms", "kind_inputs", "wire_problems"]


def kind_registries() -> dict[str, tuple[str, ...]]:
    """Kind of task -> the names of the registries of the mechanisms its tasks name, from each registered
    kind's ``mechanism_registries`` (frequency tasks: the oracles and the memoized oracles); a kind without
    device reports has none."""
    return {name: tuple(k.mechanism_registries) for name, k in kinds.KINDS.items() if k.mechanism_registries}


class Registered(NamedTuple):
    """One registered mechanism: its registry, its name, its class and the wire spec it declares."""

    registry: str
    name: str
    cls: type
    wire: WireSpec | None


def registries(names: tuple[str, ...] | None = None) -> dict[str, Mapping[str, type]]:
    """Registry name -> its ``{mechanism name: class}``, over every registered kind's
    ``mechanism_registries`` in registration order (``names``: only those, in that order).

    Raises:
        ValueError: a name no registered kind declares.
    """
    found: dict[str, Mapping[str, type]] = {}
    for kind in kinds.KINDS.values():
        for name, mapping in kinds.mechanism_registries(kind).items():
            found.setdefault(name, mapping)
    if names is None:
        return found
    unknown = [n for n in names if n not in found]
    if unknown:
        raise ValueError(f"no registered kind declares the mechanism registry {unknown[0]!r}")
    return {name: found[name] for name in names}


def kind_inputs(kind: str) -> str | None:
    """What a device of a kind encodes (:data:`ldp.payload.WIRE_INPUTS`), as its mechanisms declare it;
    None for a kind without device reports.

    Raises:
        ValueError: the kind's mechanisms declare different inputs.
    """
    found = set()
    for mechanisms in registries(kind_registries().get(kind, ())).values():
        for cls in mechanisms.values():
            spec = declared_wire(cls)
            if spec is not None:
                found.add(spec.inputs)
    if len(found) > 1:
        raise ValueError(f"the mechanisms of {kind} tasks declare different inputs {sorted(found)}")
    return found.pop() if found else None


def registered_mechanisms() -> Iterator[Registered]:
    """Every registered mechanism, registry by registry, in registration order."""
    for registry, mechanisms in registries().items():
        for name, cls in mechanisms.items():
            yield Registered(registry, name, cls, declared_wire(cls))


def byte_mechanisms(procedure: str, registry: Mapping[str, type]) -> tuple[str, ...]:
    """The names of ``registry`` whose class declares the byte procedure ``procedure``, in order."""
    out = []
    for name, cls in registry.items():
        spec = declared_wire(cls)
        if spec is not None and spec.procedure == procedure:
            out.append(name)
    return tuple(out)


def client_mechanisms(client: str, registry: Mapping[str, type]) -> tuple[str, ...]:
    """The names of ``registry`` that the client implementation ``client`` (``typescript``) encodes."""
    out = []
    for name, cls in registry.items():
        spec = declared_wire(cls)
        if spec is not None and client in spec.clients:
            out.append(name)
    return tuple(out)


def wire_problems(vectors_dir: Path | None = None, entries: Any = None) -> list[str]:
    """One line per registered mechanism whose wire spec is missing or wrong: no :class:`WireSpec`
    (neither vectors nor a stated reason), a spec on another name's vectors, or (``vectors_dir``
    given) a vector file that does not exist."""
    out = []
    for r in registered_mechanisms() if entries is None else entries:
        what = f"{r.registry} mechanism {r.name!r} ({r.cls.__module__}.{r.cls.__qualname__})"
        if r.wire is None:
            out.append(f"{what} declares no wire spec: give it `wire = WireSpec(...)` with its byte "
                       "procedure and vectors, or the reason it has none")
            continue
        if r.wire.procedure is None:
            continue
        if not str(r.wire.vectors).endswith(f"_{r.name}"):
            out.append(f"{what}: its vectors {r.wire.vectors!r} are not its own")
        elif vectors_dir is not None and not (Path(vectors_dir) / f"{r.wire.vectors}.json").is_file():
            out.append(f"{what}: no vector file {r.wire.vectors}.json in {vectors_dir}")
    return out
