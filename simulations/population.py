"""The virtual clients of a simulation: ids plus where each one's data lives.

A `Population` is cheap and picklable: a client costs its id and an index array (digits) or a
file path (a user's data folder). Workers rebuild the arrays themselves from the `DataSource`
recipe, so nothing large crosses process (or Ray) boundaries and a client that is never selected
costs no memory beyond its ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from fedort.common.client_data import ClientData, read_npz
from fedort.common.errors import ConfigError
from fedort.common.invariants import present
from fedort.simulations.data.datasets import Arrays, load_digits_split, load_npz_folder, save_npz, subset
from fedort.simulations.data.partition import label_histogram, parse_partition


def client_id(index: int) -> str:
    """Stable, sortable ids: selection is seeded over sorted ids, so runs reproduce."""
    return f"client-{index:04d}"


def choose_share(client_ids: Sequence[str], fraction: float, seed: int, stream: int) -> frozenset[str]:
    """round(fraction · n) of the clients, drawn from their own seeded stream (reproducible per seed).

    `stream` keeps unrelated choices (attackers, stragglers) independent of each other.
    """
    k = int(round(fraction * len(client_ids)))
    if k == 0:
        return frozenset()
    rng = np.random.default_rng([seed, stream])
    ids = sorted(client_ids)
    return frozenset(ids[i] for i in rng.choice(len(ids), size=k, replace=False))


def choose_stragglers(client_ids: Sequence[str], fraction: float, seed: int) -> frozenset[str]:
    """The clients that do partial work (FedProx's stragglers): a seeded share `fraction` of them."""
    if not 0 <= fraction <= 1:
        raise ConfigError(f"straggler_fraction must be in [0, 1], got {fraction}")
    return choose_share(client_ids, fraction, seed, 0x57A6)


@dataclass(frozen=True)
class DataSource:
    """How a worker gets the training arrays: the bundled digits split, or a folder of .npz files."""

    kind: str  # "digits" | "npz" (a saved training split) | "folder"
    test_fraction: float = 0.2
    seed: int = 0
    folder: Path | None = None  # the .npz file for "npz", the data folder for "folder"

    def train(self) -> Arrays | None:
        """The shared training arrays clients index into (None for a folder of per-client files)."""
        if self.kind == "digits":
            return load_digits_split(self.test_fraction, self.seed)[0]
        if self.kind == "npz":
            return read_npz(present(self.folder, "the .npz file (kind npz)"))
        return None

    def describe(self, client: VirtualClient) -> str:
        """Where a client's rows of the shared training arrays come from (what its data errors name)."""
        split = f"{self.folder}" if self.kind == "npz" else f"the digits training split (seed {self.seed})"
        return f"{split}, the rows of {client.client_id}"


@dataclass(frozen=True)
class VirtualClient:
    client_id: str
    indices: np.ndarray | None = None  # rows of DataSource.train() (digits)
    file: Path | None = None  # its own .npz (data folder)

    @property
    def size(self) -> int:
        return int(len(self.indices)) if self.indices is not None else -1


class ClientArrays:
    """A worker's view of the data: loads the source once, hands out each client's arrays."""

    def __init__(self, source: DataSource) -> None:
        self.source = source

    @cached_property
    def _train(self) -> Arrays | None:
        return self.source.train()

    def for_client(self, client: VirtualClient) -> ClientData:
        """The client's arrays, named after where they came from, so that a data error names the file."""
        if client.indices is not None:
            train = present(self._train, "the shared training arrays")
            return ClientData.from_arrays(subset(train, client.indices), source=self.source.describe(client))
        return ClientData.load(present(client.file, "the client's data file"))


@dataclass(frozen=True)
class Population:
    source: DataSource
    clients: tuple[VirtualClient, ...]
    test: Arrays
    label_histogram: np.ndarray | None = None

    def split(self, workers: int) -> list[tuple[VirtualClient, ...]]:
        """Deal clients round-robin to `workers` so each worker gets a similar share."""
        return [self.clients[w::workers] for w in range(workers) if self.clients[w::workers]]


def digits_population(
    clients: int, partition: str, seed: int, test_fraction: float = 0.2, save_dir: Path | None = None, min_size: int = 1
) -> Population:
    """Partition the digits training split among `clients` virtual clients.

    With `save_dir`, the training split is saved there as `train.npz` and workers load that
    file (a plain read) instead of importing scikit-learn again (over a second per worker).
    """
    source = DataSource("digits", test_fraction, seed)
    train, test = load_digits_split(test_fraction, seed)
    if save_dir is not None:
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        source = DataSource("npz", test_fraction, seed, save_npz(Path(save_dir) / "train.npz", train))
    parts = parse_partition(partition)(train["labels"], clients, seed, min_size=min_size)
    members = tuple(VirtualClient(client_id(i), np.asarray(p, dtype=np.int64)) for i, p in enumerate(parts))
    return Population(source, members, test, label_histogram(train["labels"], parts))


def synthetic_population(spec: str, clients: int, seed: int, save_dir: Path) -> Population:
    """Synthetic(α, β) clients (`simulations.synthetic`): each keeps its own generated rows.

    The clients' training rows are saved, concatenated, as `train.npz` in `save_dir`; each
    virtual client is an index range of it, so workers load one file as for digits.
    """
    from fedort.simulations.data.synthetic import CLASSES, parse_synthetic, synthetic_split

    s = parse_synthetic(spec)
    parts_arrays, test = synthetic_split(s.alpha, s.beta, clients, seed)
    train = {k: np.concatenate([c[k] for c in parts_arrays]) for k in ("x", "labels")}
    Path(save_dir).mkdir(parents=True, exist_ok=True)
    source = DataSource("npz", 0.0, seed, save_npz(Path(save_dir) / "train.npz", train))
    bounds = np.cumsum([0] + [len(c["labels"]) for c in parts_arrays])
    parts = [np.arange(bounds[i], bounds[i + 1], dtype=np.int64) for i in range(clients)]
    members = tuple(VirtualClient(client_id(i), p) for i, p in enumerate(parts))
    return Population(source, members, test, label_histogram(train["labels"], parts, CLASSES))


def folder_population(folder: str | Path, names: Sequence[str] | None = None) -> Population:
    """A user's folder of `client-XXXX.npz` + `test.npz` (validated up front)."""
    data = load_npz_folder(folder, names)
    source = DataSource("folder", folder=Path(folder))
    members = tuple(VirtualClient(client_id(i), file=f) for i, f in enumerate(data.client_files))
    return Population(source, members, data.test)
