"""The Flower ClientApp of one box: drives the box's `sprout serve` over HTTP to fine-tune
the federated parameters on the box's own photos, evaluate them, hand out its model's
parameters, and install the final global model as a new, promoted version.

Node config (`flower-supernode --node-config`): `url` and `token` of the service, `model`
(the registry model federated), `dataset` (the photos it trains on) and optionally
`val-dataset` (what it evaluates on, comma-separated data sets each reported on its own;
default: `dataset`).

A round's versions (the global parameters applied, the job's result) are deleted once their
parameters are read, so each run leaves one version per box: the installed global model.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .service import Arrays, Service, check_layout

app = ClientApp()


@dataclass
class Box:
    """This node's service and what it federates."""

    service: Service
    model: str
    dataset: str
    val_datasets: list[str]

    @staticmethod
    def of(context: Context) -> "Box":
        config = context.node_config
        missing = [k for k in ("url", "token", "model", "dataset") if k not in config]
        if missing:
            raise ValueError(f"--node-config lacks {missing} (url, token, model, dataset)")
        dataset = str(config["dataset"])
        val = [name.strip() for name in str(config.get("val-dataset", dataset)).split(",")]
        if not all(val):
            raise ValueError(f"--node-config val-dataset '{config['val-dataset']}' names an empty data set")
        return Box(
            Service(str(config["url"]), str(config["token"])),
            str(config["model"]),
            dataset,
            val,
        )

    def layout(self, version: int, trainable: str) -> Arrays:
        """The names and shapes parameters for this box must have: its own model's."""
        return self.service.weights(self.model, version, trainable)


def arrays_of(message: Message) -> Arrays:
    """The named float32 arrays of the message's ArrayRecord."""
    record = message.content.array_records["arrays"]
    return {name: array.numpy() for name, array in record.items()}


def reply(message: Message, arrays: Arrays | None, metrics: dict) -> Message:
    content = RecordDict({"metrics": MetricRecord(metrics)})
    if arrays is not None:
        content["arrays"] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    return Message(content=content, reply_to=message)


def trainable_of(message: Message) -> str:
    return str(message.content.config_records["config"]["trainable"])


@app.train()
def train(message: Message, context: Context) -> Message:
    """Applies the global parameters onto the box's current version, fine-tunes them there
    with a job and returns what it learned, weighted by the box's training images."""
    box = Box.of(context)
    config = message.content.config_records["config"]
    trainable = trainable_of(message)
    given = arrays_of(message)
    base = box.service.current_version(box.model)
    check_layout(given, box.layout(base, trainable), "the global parameters")
    start = box.service.apply(box.model, base, given)
    job = box.service.train(
        {
            "dataset": box.dataset,
            "base": {"model": {"name": box.model, "version": start}},
            "model": box.model,
            "trainable": trainable,
            "optimizer": str(config["optimizer"]),
            "lr": float(config["lr"]),
            "epochs": int(config["local-epochs"]),
            "batch_size": int(config["batch-size"]),
            "seed": int(config["server-round"]),
            # FedProx sends its mu; FedAvg none.
            "proximal_mu": float(config.get("proximal-mu", 0.0)),
            "batch_norm": str(config.get("batch-norm", "batch")),
            "logit_adjust": float(config.get("logit-adjust", 0.0)),
        }
    )
    trained = box.layout(job["version"], trainable)
    check_layout(trained, given, "the trained parameters")
    # The job held out part of the data set to validate on (its `samples`); the rest trained.
    measured = box.service.version_metrics(box.model, job["version"])
    images = box.service.images(box.dataset)
    # Both versions are in the reply now: the registry keeps none of a round's.
    for version in (job["version"], start):
        box.service.delete_version(box.model, version)
    return reply(
        message,
        trained,
        {
            "num-examples": max(1, images - int(measured["samples"])),
            "local-val-accuracy": float(measured["final_accuracy"]),
            "local-val-loss": float(measured["final_loss"]),
        },
    )


@app.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    """Accuracy and loss of the global parameters on the box's validation photos: over all
    of them, and per data set (`accuracy:NAME`, `samples:NAME`)."""
    box = Box.of(context)
    given = arrays_of(message)
    base = box.service.current_version(box.model)
    check_layout(given, box.layout(base, trainable_of(message)), "the global parameters")
    results = {name: box.service.evaluate(box.model, base, name, given) for name in box.val_datasets}
    samples = sum(int(r["samples"]) for r in results.values())
    metrics = {
        "num-examples": samples,
        "accuracy": sum(float(r["accuracy"]) * int(r["samples"]) for r in results.values()) / max(1, samples),
        "loss": sum(float(r["loss"]) * int(r["samples"]) for r in results.values()) / max(1, samples),
    }
    for name, result in results.items():
        metrics[f"accuracy:{name}"] = float(result["accuracy"])
        metrics[f"samples:{name}"] = int(result["samples"])
    return reply(message, None, metrics)


@app.query("parameters")
def parameters(message: Message, context: Context) -> Message:
    """The box's current model's parameters (the trainable selection): a starting point."""
    box = Box.of(context)
    version = box.service.current_version(box.model)
    return reply(message, box.layout(version, trainable_of(message)), {"version": version})


@app.query("install")
def install(message: Message, context: Context) -> Message:
    """Registers the global parameters on the box's current version as a new, promoted
    version."""
    box = Box.of(context)
    given = arrays_of(message)
    base = box.service.current_version(box.model)
    check_layout(given, box.layout(base, trainable_of(message)), "the final global parameters")
    version = box.service.apply(box.model, base, given, promote=True)
    return reply(message, None, {"version": version})
