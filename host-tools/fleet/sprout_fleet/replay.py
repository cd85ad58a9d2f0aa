"""The fleet benchmark replayed outside Flower: the same five boxes (`sprout serve` each, the
bench's photos, seeds and pretrained base), the same API calls as the ClientApp, FedAvg with
pooled batch-norm statistics in numpy, so variants of the local training and of the pooled
baseline are measured in minutes, without a SuperLink. Results are printed and appended to
`WORK/replay.jsonl`. The defaults are the bench's setting before it moved to 8 local epochs
at lr 0.0025 with FixBN after 1 round (`local-epochs=8 lr=0.0025 fix-batch-norm-after=1`;
its baselines `epochs=80 lr=0.0025`), so the README's earlier tables replay as written.

    python -m sprout_fleet.replay --sprout target/release/sprout --work target/fleet-replay \\
        'fedavg rounds=10 local-epochs=2' 'pooled epochs=4' 'pooled epochs=20 batch=40'

Each experiment is a kind (`fedavg`, `pooled`, `single`) and `key=value` settings: `lr`
(0.005), `optimizer` (`sgd`: momentum 0.9; `adamw`), `batch` (8), `schedule` (`cosine`: for fedavg from round to round, for pooled and
single over the job), `seed` (1: the jobs' shuffling and split), and for fedavg `rounds`
(10), `local-epochs` (2), `local-schedule` (`constant`: the lr within a round's job;
`cosine` decays it over the job), `server-lr` (1), `scaffold` (1: SCAFFOLD's control variates, the jobs' `gradient_offset`),
`domain-stats` (1: also evaluate the final model with batch-norm statistics recomputed,
at lr 1e-9 for 10 epochs, on one box per domain, each domain's held-out photos with its
own, and on all photos pooled), `fix-batch-norm-after` (3: later rounds' jobs
train with `batch_norm` "running"; 0: never), `fixed-batch` (those rounds' batch; 0: `batch`),
`refresh-stats` (N: before the first fixed round, every box re-estimates the statistics in
a job at lr 1e-9 for N epochs, pooled), `carry-momentum` (`none`; `box`, `average`: momentum
carried across rounds, emulated by `CarriedMomentum`), `local-bn` (1: each box keeps its
own batch-norm weights, shifts and statistics, FedBN-like; the global model still averages
them), `logit-adjust` (TAU: every job's loss reads logits + TAU * ln(its class
frequencies), the job request's `logit_adjust`; 0: off); for pooled and single `epochs`
(20). `--base-seed N` pretrains another base.
Needs numpy and safetensors, not Flower.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .averaging import control_offset, control_update, fedavg, pool_statistics, round_lr, zero_control
from .service import Service, encode_offset

MODEL = "leafnet"
CLASSES = ["healthy", "leaf_spot", "rust"]
SIZE = "32"
# The bench's boxes (xtask/src/bench_fleet.rs): domain of each, photos of its own class and
# of each other class, held-out photos per class and domain.
DOMAINS = ["source", "source", "target", "target", "target"]
MAJOR, MINOR, HELD_OUT = 24, 6, 24
HELD_OUT_SETS = ["held-out-source", "held-out-target"]
DEFAULTS = {
    "lr": 0.005,
    "optimizer": "sgd",
    "batch": 8,
    "schedule": "cosine",
    "seed": 1,
    "rounds": 10,
    "local-epochs": 2,
    "local-schedule": "constant",
    "server-lr": 1.0,
    "scaffold": 0,
    "domain-stats": 0,
    "epochs": 20,
    "batch-norm": "batch",
    "carry-momentum": "none",
    "local-bn": 0,
    "fix-batch-norm-after": 3,
    "fixed-batch": 0,
    "refresh-stats": 0,
    "logit-adjust": 0.0,
}


def sprout(binary: Path, *args: str) -> str:
    return subprocess.run([str(binary), *args], check=True, capture_output=True, text=True).stdout


def leaves(binary: Path, out: Path, domain: str, classes: str, count: int, seed: int) -> None:
    sprout(binary, "data", "leaves", "--domain", domain, "--classes", classes, "--size", SIZE,
           "--per-class", str(count), "--seed", str(seed), "-o", str(out))


def photos(folder: Path, prefix: str = "") -> list[tuple[str, str, bytes]]:
    """The photos under `folder/{train,val}/<class>/` as (class, name, bytes), in the bench's
    order and names."""
    found = []
    for split in ("train", "val"):
        for cls in sorted((folder / split).iterdir()):
            for file in sorted(cls.iterdir()):
                found.append((cls.name, f"{prefix}{split}-{file.name}", file.read_bytes()))
    return found


def multipart(parts: list[tuple[str, str, bytes]]) -> tuple[str, bytes]:
    boundary = "sprout-replay-4c1d"
    body = bytearray()
    for cls, name, data in parts:
        body += f'--{boundary}\r\nContent-Disposition: form-data; name="{cls}"; filename="{name}"\r\n\r\n'.encode()
        body += data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", bytes(body)


class Box:
    """One `sprout serve` with its data sets and the base model as version 1."""

    def __init__(self, binary: Path, folder: Path, base: Path, datasets: dict) -> None:
        data = folder / "data"
        token = sprout(binary, "serve", "token", "create", "--scope", "train", "--data-dir", str(data)).strip()
        log = open(folder / "serve.log", "w")
        self.process = subprocess.Popen(
            [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
            stdout=subprocess.PIPE, stderr=log, text=True,
        )
        line = self.process.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"sprout serve printed '{line}'")
        # A loaded machine took over 120 s (the default) to answer a job request.
        self.service = Service(line.removeprefix("listening on "), token, timeout=600.0)
        for name, parts in datasets.items():
            self.service._json("POST", "/datasets", body={"name": name, "classes": CLASSES})
            kind, body = multipart(parts)
            self.service._call("POST", f"/datasets/{name}/images", None, body, kind)
        self.service._call("POST", f"/models/{MODEL}/versions", None, base.read_bytes())

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def setup(binary: Path, work: Path, base_seed: int = 0) -> list[Box]:
    """The bench's pretrained base, photos and five boxes, in `work` (emptied first);
    `base_seed` other than 0 pretrains another base (its photos' and weights' seed)."""
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    leaves(binary, work / "pretrain", "source", ",".join(CLASSES), 30, 100 + base_seed)
    base = work / "base.sprout"
    sprout(binary, "train", "--zoo", MODEL, "--seed", str(base_seed), "--epochs", "8", "--batch-size", "8", "--optimizer", "adamw",
           "--lr", "0.003", "--data", str(work / "pretrain"), "-o", str(base), "--out-dir", str(work / "pretrain-run"))
    held_out = {}
    for d, domain in enumerate(("source", "target")):
        leaves(binary, work / f"held-out-{domain}", domain, ",".join(CLASSES), HELD_OUT, 900 + d)
        held_out[f"held-out-{domain}"] = photos(work / f"held-out-{domain}")
    own = []
    for i, domain in enumerate(DOMAINS):
        parts = []
        for c, cls in enumerate(CLASSES):
            folder = work / f"box-{i}/photos/{cls}"
            leaves(binary, folder, domain, cls, MAJOR if c == i % len(CLASSES) else MINOR, 10 * i + c)
            parts += photos(folder, f"{i}-")
        own.append(parts)
    boxes = []
    for i, parts in enumerate(own):
        datasets = {"train": parts, **held_out}
        if i == 0:
            datasets["pooled"] = [p for box in own for p in box]
        boxes.append(Box(binary, work / f"box-{i}", base, datasets))
    return boxes


def held_out(box: Box, version: int, arrays=None) -> dict:
    """Accuracy on all held-out photos and per domain of `version` (with `arrays` applied)."""
    results = {s: box.service.evaluate(MODEL, version, s, arrays) for s in HELD_OUT_SETS}
    samples = sum(r["samples"] for r in results.values())
    accuracy = {s.removeprefix("held-out-"): r["accuracy"] for s, r in results.items()}
    return {"all": sum(r["accuracy"] * r["samples"] for r in results.values()) / samples, **accuracy}


def job(box: Box, dataset: str, version: int, lr: float, epochs: int, settings: dict, schedule: str, seed: int, offset=None) -> dict:
    request = {
        "dataset": dataset, "base": {"model": {"name": MODEL, "version": version}}, "model": MODEL,
        "trainable": "all", "optimizer": str(settings["optimizer"]), "lr": lr, "epochs": epochs,
        "batch_size": int(settings["batch"]), "schedule": schedule, "seed": seed,
        "batch_norm": str(settings["batch-norm"]),
    }
    if float(settings["logit-adjust"]) > 0:
        request["logit_adjust"] = float(settings["logit-adjust"])
    if offset is not None:
        request["gradient_offset"] = encode_offset(offset)
    return box.service.train(request)


def baseline(boxes: list[Box], kind: str, s: dict) -> list[dict]:
    """The pooled job on box 0, or every box's own job, from the base; held-out accuracy."""
    chosen = [(boxes[0], "pooled")] if kind == "pooled" else [(b, "train") for b in boxes]
    results = []
    for box, dataset in chosen:
        trained = job(box, dataset, 1, float(s["lr"]), int(s["epochs"]), s, str(s["schedule"]), int(s["seed"]))
        results.append(held_out(box, trained["version"]))
        if int(s["domain-stats"]):
            results[-1]["statistics"] = recomputed(boxes, box.service.weights(MODEL, trained["version"], "all"), s)
        box.service.delete_version(MODEL, trained["version"])
    return results


def train_from(box: Box, weights, lr: float, epochs: int, settings: dict, schedule: str, seed: int,
               offset=None) -> tuple[dict, int]:
    """A training job on `box` from `weights`: the trained weights and the photos the job
    held out; the job's start and result versions are deleted again."""
    start = box.service.apply(MODEL, 1, weights)
    trained = job(box, "train", start, lr, epochs, settings, schedule, seed, offset)
    arrays = box.service.weights(MODEL, trained["version"], "all")
    held = int(box.service.version_metrics(MODEL, trained["version"])["samples"])
    for version in (trained["version"], start):
        box.service.delete_version(MODEL, version)
    return arrays, held


class CarriedMomentum:
    """SGD momentum (0.9) carried from round to round, emulated around the service's jobs,
    which start theirs at zero: `carry` "box" keeps each box's buffer, "average" gives every
    box the boxes' average. First order, under a constant gradient per job: the carried
    buffer b's part of a job's K updates, lr * sum(beta^t, t = 1..K) * b, moves the start
    before the job; after it, the job's own buffer g (1 - beta^K) / (1 - beta) is taken from
    its displacement D = -lr g sum((1 - beta^t) / (1 - beta)) and b decays by beta^K."""

    BETA = 0.9

    def __init__(self, carry: str, weights, boxes: int) -> None:
        if carry not in ("box", "average"):
            raise ValueError(f"carry-momentum must be 'none', 'box' or 'average', not '{carry}'")
        self.carry = carry
        self.buffers = [zero_control(weights) for _ in range(boxes)]

    def shifted(self, box: int, weights, lr: float, steps: int):
        """`weights` moved by the carried buffer's part of `steps` updates at `lr`."""
        share = lr * sum(self.BETA**t for t in range(1, steps + 1))
        buffer = self.buffers[box]
        return {n: (v - share * buffer[n]).astype(v.dtype) if n in buffer else v for n, v in weights.items()}

    def update(self, box: int, start, trained, lr: float, steps: int) -> None:
        """The box's buffer after a job of `steps` updates at `lr` from `start` to `trained`."""
        beta = self.BETA
        spread = sum((1 - beta**t) / (1 - beta) for t in range(1, steps + 1))
        fresh = (1 - beta**steps) / (1 - beta) / (lr * spread)
        self.buffers[box] = {n: beta**steps * b - fresh * (trained[n] - start[n]) for n, b in self.buffers[box].items()}

    def end_round(self) -> None:
        if self.carry == "average":
            mean = {n: sum(b[n] for b in self.buffers) / len(self.buffers) for n in self.buffers[0]}
            self.buffers = [dict(mean) for _ in self.buffers]


def federate(boxes: list[Box], s: dict, report) -> dict:
    """FedAvg as the ServerApp runs it, the ClientApp's calls on every box each round."""
    rounds = int(s["rounds"])
    weights = boxes[0].service.weights(MODEL, 1, "all")
    images = [b.service.images("train") for b in boxes]
    scaffold = bool(int(s["scaffold"]))
    if scaffold and s["local-schedule"] != "constant":
        raise ValueError("scaffold=1 takes local-schedule=constant (its control variates assume K steps at one lr)")
    control = zero_control(weights)
    controls = [zero_control(weights) for _ in boxes]
    epochs, batch = int(s["local-epochs"]), int(s["batch"])
    momentum = None if s["carry-momentum"] == "none" else CarriedMomentum(str(s["carry-momentum"]), weights, len(boxes))
    # Each box's batch-norm weights, shifts and statistics when they stay local (`local-bn`).
    own_bn: list[dict] = [{} for _ in boxes]
    bn_names = {n for n in weights if n.rsplit(".", 1)[0] + ".running_mean" in weights}
    # Each box's updates per job (its training images are known after its first job).
    steps = [0] * len(boxes)

    def local(i: int, lr: float, round_: int):
        box = boxes[i]
        begin = {**weights, **own_bn[i]}
        if momentum:
            begin = momentum.shifted(i, begin, lr, steps[i])
        offset = control_offset(controls[i], control) if scaffold and round_ > 1 else None
        settings = s
        if 0 < int(s["fix-batch-norm-after"]) < round_:
            settings = {**s, "batch-norm": "running", "batch": int(s["fixed-batch"]) or batch}
        seed = int(s["seed"]) + round_ - 1
        arrays, held = train_from(box, begin, lr, epochs, settings, str(s["local-schedule"]), seed, offset)
        trained_images = images[i] - held
        steps[i] = epochs * (trained_images // int(settings["batch"]))
        if momentum:
            momentum.update(i, begin, arrays, lr, steps[i])
        if int(s["local-bn"]):
            own_bn[i] = {n: arrays[n] for n in bn_names}
        if scaffold:
            controls[i] = control_update(controls[i], control, weights, arrays, steps[i], lr)
        return arrays, max(1, trained_images)

    for r in range(1, rounds + 1):
        lr = round_lr(str(s["schedule"]), float(s["lr"]), r, rounds)
        before = [dict(c) for c in controls]
        if int(s["refresh-stats"]) and r == int(s["fix-batch-norm-after"]) + 1:
            weights = refreshed(boxes, weights, int(s["refresh-stats"]), s)
        with ThreadPoolExecutor(len(boxes)) as pool:
            replies = list(pool.map(lambda i: local(i, lr, r), range(len(boxes))))
        weights = fedavg(weights, replies, float(s["server-lr"]))
        if momentum:
            momentum.end_round()
        if scaffold:
            control = {n: c + sum(after[n] - old[n] for after, old in zip(controls, before)) / len(boxes) for n, c in control.items()}
        report({"round": r, "lr": lr, **held_out(boxes[0], 1, weights)})
    if int(s["domain-stats"]):
        report({"statistics": recomputed(boxes, weights, s)})
    return held_out(boxes[0], 1, weights)


def refreshed(boxes: list[Box], weights, epochs: int, s: dict):
    """`weights` with batch-norm statistics re-estimated on every box (a job at lr 1e-9 for
    `epochs`, batch statistics) and pooled."""

    def one(box: Box):
        arrays, _ = train_from(box, weights, 1e-9, epochs, {**s, "batch-norm": "batch"}, "constant", 1)
        return arrays, box.service.images("train")

    with ThreadPoolExecutor(len(boxes)) as pool:
        replies = list(pool.map(one, boxes))
    return pool_statistics(weights, replies)


def recomputed(boxes: list[Box], weights, s: dict) -> dict:
    """Held-out accuracy of `weights` with batch-norm statistics recomputed (a job at lr
    1e-9 moves little else): per domain on a box of that domain's photos, each domain's
    held-out photos evaluated with its own; and on all photos pooled (box 0's `pooled`)."""

    def statistics(box: Box, dataset: str) -> int:
        start = box.service.apply(MODEL, 1, weights)
        trained = job(box, dataset, start, 1e-9, 10, {**s, "optimizer": "sgd"}, "constant", 1)
        box.service.delete_version(MODEL, start)
        return trained["version"]

    found = {}
    for domain in ("source", "target"):
        box = boxes[DOMAINS.index(domain)]
        version = statistics(box, "train")
        found[domain] = box.service.evaluate(MODEL, version, f"held-out-{domain}", None)["accuracy"]
        box.service.delete_version(MODEL, version)
    version = statistics(boxes[0], "pooled")
    found["pooled"] = held_out(boxes[0], version)
    boxes[0].service.delete_version(MODEL, version)
    return {"per-domain": (found["source"] + found["target"]) / 2, **found}


def parse(spec: str) -> tuple[str, dict]:
    kind, *pairs = spec.split()
    if kind not in ("fedavg", "pooled", "single"):
        raise ValueError(f"experiment '{spec}': the kind must be fedavg, pooled or single")
    settings = dict(DEFAULTS)
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in DEFAULTS or not value:
            raise ValueError(f"experiment '{spec}': unknown setting '{pair}' (known: {', '.join(DEFAULTS)})")
        settings[key] = value
    return kind, settings


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sprout", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--base-seed", type=int, default=0,
                        help="0: the bench's base; otherwise pretrain another (its photos' and weights' seed)")
    parser.add_argument("experiments", nargs="+")
    args = parser.parse_args(argv)
    experiments = [(spec, *parse(spec)) for spec in args.experiments]
    started = time.monotonic()
    boxes = setup(args.sprout, args.work, args.base_seed)
    out = open(args.work / "replay.jsonl", "a")

    def report(entry: dict) -> None:
        entry = {"experiment": spec, "base": args.base_seed, "seconds": round(time.monotonic() - started), **entry}
        print(json.dumps(entry), flush=True)
        out.write(json.dumps(entry) + "\n")
        out.flush()

    try:
        for spec, kind, settings in experiments:
            if kind == "fedavg":
                report({"final": federate(boxes, settings, report)})
            else:
                results = baseline(boxes, kind, settings)
                report({"final": results[0] if kind == "pooled" else max(results, key=lambda a: a["all"]), "each": results})
    finally:
        for box in boxes:
            box.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
