"""The Flower ClientApp of one box: drives the box's `sprout serve` over HTTP to fine-tune
the federated parameters on the box's own photos, evaluate them, hand out its model's
parameters, and install the final global model as a new, promoted version.

Node config (`flower-supernode --node-config`): `url` and `token` of the service, `model`
(the registry model federated), `dataset` (the photos it trains on) and optionally
`val-dataset` (what it evaluates on; default: `dataset`).
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
    val_dataset: str

    @staticmethod
    def of(context: Context) -> "Box":
        config = context.node_config
        missing = [k for k in ("url", "token", "model", "dataset") if k not in config]
        if missing:
            raise ValueError(f"--node-config lacks {missing} (url, token, model, dataset)")
        dataset = str(config["dataset"])
        return Box(
            Service(str(config["url"]), str(config["token"])),
            str(config["model"]),
            dataset,
            str(config.get("val-dataset", dataset)),
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
        }
    )
    trained = box.layout(job["version"], trainable)
    check_layout(trained, given, "the trained parameters")
    # The job held out part of the data set to validate on (its `samples`); the rest trained.
    measured = box.service.version_metrics(box.model, job["version"])
    images = box.service.images(box.dataset)
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
    """Accuracy and loss of the global parameters on the box's validation photos."""
    box = Box.of(context)
    given = arrays_of(message)
    base = box.service.current_version(box.model)
    check_layout(given, box.layout(base, trainable_of(message)), "the global parameters")
    result = box.service.evaluate(box.model, base, box.val_dataset, given)
    return reply(
        message,
        None,
        {
            "num-examples": int(result["samples"]),
            "accuracy": float(result["accuracy"]),
            "loss": float(result["loss"]),
        },
    )


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
