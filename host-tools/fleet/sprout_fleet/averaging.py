"""Federated averaging on plain numpy arrays, without Flower: batch-norm statistics pooled
across boxes, the learning rate of each round, and FedAvg's step. The ServerApp uses the
first two inside Flower's strategies; the replay harness (`replay.py`) all three."""

from __future__ import annotations

import math

import numpy as np

Arrays = dict[str, np.ndarray]


def is_statistic(name: str) -> bool:
    """Whether tensor `name` is a batch-norm running statistic rather than a weight."""
    return name.endswith((".running_mean", ".running_var"))


def pool_statistics(arrays: Arrays, replies: list[tuple[Arrays, float]]) -> Arrays:
    """`arrays` with each batch norm's running statistics set to those of all the boxes'
    data pooled (`replies`: each box's arrays and weight): `running_mean` the replies'
    weighted average, `running_var` the average variance plus the spread of the boxes'
    means, sum(w * (var + mean^2)) - mean_avg^2. A plain average of variances leaves that
    spread out, so a model averaged over boxes that see different domains normalises with
    too small a variance. Taken from the replies, not from `arrays`, so a server optimizer's
    step (made for weights) never moves a statistic past the boxes' values (a variance below
    zero describes no data)."""
    weights = np.array([float(w) for _, w in replies])
    weights = weights / weights.sum()

    def average(name: str, power: int = 1) -> np.ndarray:
        return sum(w * r[name].astype(np.float64) ** power for w, (r, _) in zip(weights, replies))

    pooled = {}
    for name, values in arrays.items():
        mean_name = name.removesuffix(".running_var") + ".running_mean"
        if is_statistic(name):
            values = np.asarray(average(name), dtype=values.dtype)
        if name.endswith(".running_var") and mean_name in arrays:
            spread = np.maximum(average(mean_name, 2) - average(mean_name) ** 2, 0)
            values = np.asarray(values + spread, dtype=values.dtype)
        pooled[name] = values
    return pooled


def fedavg(current: Arrays, replies: list[tuple[Arrays, float]], server_lr: float = 1.0) -> Arrays:
    """The next global parameters: `current` moved by `server_lr` times the step to the
    replies' weighted average (1: the average itself), batch-norm statistics pooled."""
    total = sum(float(w) for _, w in replies)
    moved = {}
    for name, values in current.items():
        average = sum(float(w) / total * r[name].astype(np.float64) for r, w in replies)
        moved[name] = np.asarray(values + server_lr * (average - values), dtype=values.dtype)
    return pool_statistics(moved, replies)


def round_lr(schedule: str, lr: float, server_round: int, rounds: int) -> float:
    """The learning rate of round `server_round` (from 1) of `rounds`: `constant` keeps
    `lr`; `cosine` starts at `lr`, halves it by the middle round and decays towards 0,
    lr * (1 + cos(pi * (round - 1) / rounds)) / 2, so the last round still learns."""
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        return lr * (1 + math.cos(math.pi * (server_round - 1) / rounds)) / 2
    raise ValueError(f"run config: lr-schedule must be 'constant' or 'cosine', not '{schedule}'")


def control_update(control: Arrays, global_control: Arrays, start: Arrays, trained: Arrays, steps: int, lr: float) -> Arrays:
    """A box's next SCAFFOLD control variate (Karimireddy et al. 2020, option II):
    `c_i - c + (x - y_i) / (K lr)` for every parameter in `global_control`, from the round's
    starting parameters `x`, the box's trained `y_i` after `steps` (K) updates at `lr`.
    With momentum the step per unit lr includes its amplification; the offset `c - c_i`
    is applied in the same units (after each update, `-lr * offset`)."""
    if steps < 1 or not lr > 0:
        raise ValueError(f"SCAFFOLD needs at least one update at a positive lr ({steps} at {lr})")
    scale = 1.0 / (steps * lr)
    return {
        name: np.asarray(control[name] - c + (start[name].astype(np.float64) - trained[name]) * scale, dtype=np.float32)
        for name, c in global_control.items()
    }


def control_offset(control: Arrays, global_control: Arrays) -> Arrays:
    """The gradient offset of a box's job, `c - c_i`, by parameter."""
    return {name: np.asarray(c - control[name], dtype=np.float32) for name, c in global_control.items()}


def zero_control(arrays: Arrays) -> Arrays:
    """Zero control variates for the parameters of `arrays` (no batch-norm statistic)."""
    return {name: np.zeros_like(values, dtype=np.float32) for name, values in arrays.items() if not is_statistic(name)}
