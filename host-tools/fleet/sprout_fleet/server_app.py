"""The Flower ServerApp: federated averaging of a sprout model's trainable parameters
(and batch-norm running statistics) across boxes. It takes the starting parameters from
one box's model, runs FedAvg (FedProx when `proximal-mu` > 0, FedAvgM when
`server-momentum` > 0 or `server-lr` is not 1, FedAdam, FedYogi or FedAdagrad by
`server-optimizer`) for the configured rounds, at a learning rate that may decay from
round to round, pooling batch-norm variances across boxes and, with
`fix-batch-norm-after`, training the boxes' batch norms with those pooled statistics after
the first rounds (each box fine-tunes through its `sprout serve`, then every box evaluates
the average on its validation photos), refuses replies whose parameters do not match the global model's
names and shapes or are not finite, reports the global accuracy per round and installs
the final parameters on every box as a new, promoted version.

Run config: see `[tool.flwr.app.config]` in pyproject.toml.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from logging import INFO, WARNING

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedProx, FedYogi
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from .averaging import is_statistic, pool_statistics, round_lr

app = ServerApp()


class Report:
    """Logs each round's global evaluation and appends it to the summary file, if any."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.round = 0
        # The round's training metrics, written with its evaluation.
        self.local: dict[str, float] = {}
        if path:
            open(path, "w", encoding="utf-8").close()

    def write(self, entry: dict) -> None:
        if self.path:
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(json.dumps(entry) + "\n")

    def trained(self, records: list[RecordDict], weighted_by: str) -> MetricRecord:
        """FedAvg's aggregation of the boxes' training metrics (their jobs' validation loss
        and accuracy on their own photos), logged: a loss that rises round after round
        means the local training overshoots."""
        metrics = aggregate_metricrecords(records, weighted_by)
        self.local = {"local-loss": float(metrics["local-val-loss"]), "local-accuracy": float(metrics["local-val-accuracy"])}
        log(
            INFO,
            "fleet round %d: the boxes' own validation loss %.4f, accuracy %.1f%% after training",
            self.round + 1,
            self.local["local-loss"],
            100 * self.local["local-accuracy"],
        )
        return metrics

    def evaluated(self, records: list[RecordDict], weighted_by: str) -> MetricRecord:
        """FedAvg's metric aggregation (a weighted mean), reported as it happens, with the
        accuracy on each validation data set over the boxes that have it."""
        metrics = aggregate_metricrecords(records, weighted_by)
        self.round += 1
        replies = [next(iter(r.metric_records.values())) for r in records]
        samples = sum(int(m[weighted_by]) for m in replies)
        datasets = {}
        for name in sorted({k.split(":", 1)[1] for m in replies for k in m.keys() if k.startswith("samples:")}):
            counts = [(float(m[f"accuracy:{name}"]), int(m[f"samples:{name}"])) for m in replies if f"samples:{name}" in m]
            datasets[name] = sum(a * n for a, n in counts) / max(1, sum(n for _, n in counts))
        log(
            INFO,
            "fleet round %d: global accuracy %.1f%%, loss %.4f on %d validation images of %d boxes (%s)",
            self.round,
            100 * float(metrics["accuracy"]),
            float(metrics["loss"]),
            samples,
            len(records),
            ", ".join(f"{name} {100 * a:.1f}%" for name, a in datasets.items()),
        )
        self.write(
            {
                "round": self.round,
                "accuracy": float(metrics["accuracy"]),
                "loss": float(metrics["loss"]),
                "samples": samples,
                "boxes": len(records),
                "datasets": datasets,
                **self.local,
            }
        )
        self.local = {}
        return metrics


def refusal(arrays: ArrayRecord, expected: dict[str, tuple[int, ...]]) -> str | None:
    """Why a box's trained parameters cannot be averaged into the global model (names,
    shapes, non-finite values), or None when they can."""
    missing = sorted(set(expected) - set(arrays.keys()))
    extra = sorted(set(arrays.keys()) - set(expected))
    if missing or extra:
        return f"tensors missing {missing}, unknown {extra}"
    for name, shape in expected.items():
        values = arrays[name].numpy()
        if tuple(values.shape) != shape:
            return f"tensor '{name}' has shape {list(values.shape)}, the global model's is {list(shape)}"
        if not np.isfinite(values).all():
            bad = values[~np.isfinite(values)].flat[0]
            return f"tensor '{name}' holds {bad}"
    return None


class Screened:
    """A strategy mixin that leaves out of the average every training reply whose
    parameters `refusal` objects to, with a log line naming the box and the tensor."""

    expected: dict[str, tuple[int, ...]] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        self.expected = {name: tuple(array.shape) for name, array in arrays.items()}
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        kept = []
        for reply in replies:
            if not reply.has_error():
                why = refusal(reply.content.array_records["arrays"], self.expected)
                if why is not None:
                    log(
                        WARNING,
                        "fleet round %d: refusing node %d's parameters: %s",
                        server_round,
                        reply.metadata.src_node_id,
                        why,
                    )
                    continue
            kept.append(reply)
        return super().aggregate_train(server_round, kept)


def pooled_statistics(arrays: ArrayRecord, replies: list[RecordDict], weighted_by: str) -> ArrayRecord:
    """`arrays` with batch-norm statistics pooled across the replies (`pool_statistics`),
    each reply weighted by its metric `weighted_by`."""
    boxes = [
        ({k: a.numpy() for k, a in r.array_records["arrays"].items()}, float(next(iter(r.metric_records.values()))[weighted_by]))
        for r in replies
    ]
    pooled = pool_statistics({k: a.numpy() for k, a in arrays.items()}, boxes)
    return ArrayRecord({k: Array(v) for k, v in pooled.items()})


class PooledStatistics:
    """A strategy mixin whose average sets batch-norm statistics by `pooled_statistics`."""

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is None:
            return arrays, metrics
        contents = [r.content for r in replies if not r.has_error()]
        return pooled_statistics(arrays, contents, self.weighted_by_key), metrics


class ScheduledRate:
    """A strategy mixin that sets each round's learning rate (`lr` in the training config,
    the first round's) by `round_lr`."""

    def __init__(self, schedule: str = "constant", rounds: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        round_lr(schedule, 1.0, 1, rounds)
        self.schedule = schedule
        self.rounds = rounds
        self.base_lr: float | None = None

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        if self.base_lr is None:
            self.base_lr = float(config["lr"])
        config["lr"] = round_lr(self.schedule, self.base_lr, server_round, self.rounds)
        log(INFO, "fleet round %d: learning rate %.6f", server_round, float(config["lr"]))
        return super().configure_train(server_round, arrays, config, grid)


class FixedBatchNorm:
    """A strategy mixin for FixBN (Zhong et al. 2023): after `fix_batch_norm_after` rounds
    whose boxes train with batch statistics (the training config's `batch-norm`), every
    later round's boxes train with batch norms normalising by the global model's running
    statistics (`running`), which those rounds pooled over every box's data. A box's
    batches hold one domain and mostly one class, so normalising by them teaches weights
    for that box's normalisation rather than the global one evaluation uses. 0: never."""

    def __init__(self, fix_batch_norm_after: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        if fix_batch_norm_after < 0:
            raise ValueError(f"run config: fix-batch-norm-after must be 0 or more, not {fix_batch_norm_after}")
        self.fix_after = fix_batch_norm_after

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        if 0 < self.fix_after < server_round:
            config["batch-norm"] = "running"
            log(INFO, "fleet round %d: batch norms train with the global running statistics", server_round)
        return super().configure_train(server_round, arrays, config, grid)


class ScreenedFedAvg(Screened, ScheduledRate, FixedBatchNorm, PooledStatistics, FedAvg):
    """FedAvg over the replies `Screened` accepts."""


class ScreenedFedProx(Screened, ScheduledRate, FixedBatchNorm, PooledStatistics, FedProx):
    """FedProx (FedAvg whose boxes train with a proximal term) over accepted replies."""


class ScreenedFedAvgM(Screened, ScheduledRate, FixedBatchNorm, PooledStatistics, FedAvg):
    """FedAvgM over accepted replies: each round's velocity (the average minus the global
    parameters) adds `server_momentum` times the previous one, and the global parameters move
    by `server_lr` times it (Flower's FedAvgM convention). Kept by tensor name (Flower's
    FedAvgM pairs tensors by position, and a reply's order need not be the global model's).
    Batch-norm running statistics take the pooled average without momentum: a statistic
    pushed past the boxes' values (a variance below zero) describes no data."""

    def __init__(self, server_momentum: float = 0.0, server_lr: float = 1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.server_momentum = server_momentum
        self.server_lr = server_lr
        self.current: dict[str, np.ndarray] = {}
        self.step: dict[str, np.ndarray] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid):
        self.current = {name: array.numpy() for name, array in arrays.items()}
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        arrays, metrics = super().aggregate_train(server_round, replies)
        if arrays is None:
            return arrays, metrics
        stepped = {}
        for name, array in arrays.items():
            average = array.numpy()
            if is_statistic(name):
                stepped[name] = Array(average)
                continue
            step = average - self.current[name] + self.server_momentum * self.step.get(name, 0)
            self.step[name] = step
            moved = self.current[name] + self.server_lr * step
            stepped[name] = Array(np.asarray(moved, dtype=average.dtype))
        return ArrayRecord(stepped), metrics


# Flower's adaptive server optimizers (Reddi et al. 2020) over accepted replies, by their
# `server-optimizer` name; `server-lr` is their eta.
ADAPTIVE = {
    name: type(
        f"Screened{base.__name__}",
        (Screened, ScheduledRate, FixedBatchNorm, PooledStatistics, base),
        {"__doc__": f"{base.__name__} over accepted replies; batch-norm statistics pooled, not stepped."},
    )
    for name, base in (("adam", FedAdam), ("yogi", FedYogi), ("adagrad", FedAdagrad))
}


def wait_for_nodes(grid: Grid, count: int, timeout: float) -> list[int]:
    """The connected nodes once at least `count` are, waiting at most `timeout` seconds."""
    started = time.monotonic()
    while len(nodes := list(grid.get_node_ids())) < count:
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only {len(nodes)} of {count} boxes connected in {timeout} s")
        time.sleep(1)
    return nodes


def ask(grid: Grid, nodes: list[int], action: str, content: RecordDict, timeout: float) -> list[Message]:
    """Sends `query.ACTION` to `nodes`; the replies, each of which must have succeeded."""
    messages = [Message(content, dst_node_id=n, message_type=f"{MessageType.QUERY}.{action}") for n in nodes]
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    failed = [f"node {r.metadata.src_node_id}: {r.error.reason}" for r in replies if r.has_error()]
    if failed or len(replies) != len(nodes):
        raise RuntimeError(f"{action}: {len(replies)} of {len(nodes)} boxes answered; {failed}")
    return replies


def choose_strategy(config, common: dict):
    """The strategy the run config asks for: `server-optimizer` "avg" (FedAvg, FedProx when
    `proximal-mu` > 0, FedAvgM when `server-momentum` > 0 or `server-lr` is not 1) or one of
    `ADAPTIVE`."""
    optimizer = str(config["server-optimizer"])
    mu = float(config["proximal-mu"])
    momentum = float(config["server-momentum"])
    server_lr = float(config["server-lr"])
    if optimizer in ADAPTIVE:
        if mu > 0 or momentum > 0:
            raise ValueError(f"run config: server-optimizer '{optimizer}' takes no proximal-mu or server-momentum")
        return ADAPTIVE[optimizer](eta=server_lr, eta_l=float(config["lr"]), **common)
    if optimizer != "avg":
        raise ValueError(f"run config: server-optimizer must be 'avg', {', '.join(map(repr, ADAPTIVE))}, not '{optimizer}'")
    if mu > 0:
        if momentum > 0 or server_lr != 1:
            raise ValueError("run config: proximal-mu > 0 takes server-momentum 0 and server-lr 1")
        return ScreenedFedProx(proximal_mu=mu, **common)
    if momentum > 0 or server_lr != 1:
        return ScreenedFedAvgM(server_momentum=momentum, server_lr=server_lr, **common)
    return ScreenedFedAvg(**common)


def train_settings(config) -> ConfigRecord:
    """What every box's training job gets from the run config, checked: `batch-norm` is
    "batch" or "running", `logit-adjust` a finite number of 0 or more (absent: 0)."""
    batch_norm = str(config["batch-norm"])
    if batch_norm not in ("batch", "running"):
        raise ValueError(f"run config: batch-norm must be 'batch' or 'running', not '{batch_norm}'")
    logit_adjust = float(config.get("logit-adjust", 0.0))
    if not (math.isfinite(logit_adjust) and logit_adjust >= 0):
        raise ValueError(f"run config: logit-adjust must be a finite number of 0 or more, not {logit_adjust}")
    return ConfigRecord(
        {
            "trainable": str(config["trainable"]),
            "local-epochs": int(config["local-epochs"]),
            "lr": float(config["lr"]),
            "batch-size": int(config["batch-size"]),
            "optimizer": str(config["optimizer"]),
            "batch-norm": batch_norm,
            "logit-adjust": logit_adjust,
        }
    )


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    trainable = str(config["trainable"])
    timeout = float(config["round-timeout"])
    min_nodes = int(config["min-nodes"])
    report = Report(str(config["summary-file"]))

    nodes = wait_for_nodes(grid, min_nodes, timeout)
    selection = ConfigRecord({"trainable": trainable})
    first = ask(grid, nodes[:1], "parameters", RecordDict({"config": selection}), timeout)[0]
    initial = first.content.array_records["arrays"]
    log(INFO, "starting from node %d's model: %d tensors (%s)", nodes[0], len(initial), trainable)

    common = dict(
        schedule=str(config["lr-schedule"]),
        rounds=int(config["num-server-rounds"]),
        fraction_train=float(config["fraction-train"]),
        fraction_evaluate=float(config["fraction-evaluate"]),
        min_train_nodes=min_nodes,
        min_evaluate_nodes=min_nodes,
        min_available_nodes=min_nodes,
        train_metrics_aggr_fn=report.trained,
        evaluate_metrics_aggr_fn=report.evaluated,
    )
    train_config = train_settings(config)
    common["fix_batch_norm_after"] = int(config["fix-batch-norm-after"])
    if train_config["batch-norm"] == "running" and common["fix_batch_norm_after"] > 0:
        raise ValueError("run config: fix-batch-norm-after > 0 takes batch-norm 'batch' (its first rounds)")
    strategy = choose_strategy(config, common)
    result = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=int(config["num-server-rounds"]),
        timeout=timeout,
        train_config=train_config,
        evaluate_config=selection,
    )

    final = RecordDict({"arrays": result.arrays, "config": selection})
    boxes = list(grid.get_node_ids())
    installed = []
    for reply in ask(grid, boxes, "install", final, timeout):
        version = int(reply.content.metric_records["metrics"]["version"])
        installed.append({"node": reply.metadata.src_node_id, "version": version})
        log(INFO, "fleet installed the global model on node %d as version %d", installed[-1]["node"], version)
    report.write({"installed": installed})
