"""Checks of the fleet apps' safety: the ServerApp leaves parameters of the wrong names or
shapes, or with NaN or infinity, out of the average with a log line naming the box and
the tensor; against a live box (`SPROUT_FLEET_URL`, `SPROUT_FLEET_TOKEN`,
`SPROUT_FLEET_MODEL`, set by `cargo xtask test fleet`), the ClientApp's service client
sends the token, the service refuses bad uploads with a 422 naming the tensor, and a
round's versions can be deleted."""

from __future__ import annotations

import os
import unittest
from types import SimpleNamespace

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from sprout_fleet.server_app import (
    ADAPTIVE,
    ScreenedFedAvg,
    ScreenedFedAvgM,
    ScreenedFedProx,
    choose_strategy,
    refusal,
    round_lr,
    train_settings,
)
from sprout_fleet.averaging import control_offset, control_update, fedavg, zero_control
from sprout_fleet.replay import CarriedMomentum, parse
from sprout_fleet.service import Service, ServiceError, encode_offset


def record(arrays: dict[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in arrays.items()})


class Reply:
    """What the strategy reads of a training reply."""

    def __init__(self, node: int, arrays: dict[str, np.ndarray], examples: int) -> None:
        self.metadata = SimpleNamespace(src_node_id=node)
        self.content = RecordDict({"arrays": record(arrays), "metrics": MetricRecord({"num-examples": examples})})

    def has_error(self) -> bool:
        return False


GOOD = {"fc.weight": np.ones((3, 2), np.float32), "fc.bias": np.zeros(3, np.float32)}
EXPECTED = {"fc.weight": (3, 2), "fc.bias": (3,)}


class Screening(unittest.TestCase):
    def test_refusals_name_the_tensor(self) -> None:
        self.assertIsNone(refusal(record(GOOD), EXPECTED))
        wide = dict(GOOD, **{"fc.weight": np.ones((2, 3), np.float32)})
        self.assertEqual(
            refusal(record(wide), EXPECTED),
            "tensor 'fc.weight' has shape [2, 3], the global model's is [3, 2]",
        )
        nan = dict(GOOD, **{"fc.bias": np.array([0, np.nan, 0], np.float32)})
        self.assertEqual(refusal(record(nan), EXPECTED), "tensor 'fc.bias' holds nan")
        inf = dict(GOOD, **{"fc.bias": np.array([0, 0, -np.inf], np.float32)})
        self.assertEqual(refusal(record(inf), EXPECTED), "tensor 'fc.bias' holds -inf")
        renamed = {"head.weight": GOOD["fc.weight"], "fc.bias": GOOD["fc.bias"]}
        self.assertEqual(
            refusal(record(renamed), EXPECTED), "tensors missing ['fc.weight'], unknown ['head.weight']"
        )

    def test_the_average_leaves_bad_replies_out(self) -> None:
        strategy = ScreenedFedAvg()
        strategy.expected = EXPECTED
        twice = {k: 3 * v for k, v in GOOD.items()}
        nan = dict(GOOD, **{"fc.bias": np.full(3, np.nan, np.float32)})
        replies = [Reply(1, GOOD, 10), Reply(2, nan, 1000), Reply(3, twice, 10)]
        with self.assertLogs("flwr", "WARNING") as logs:
            arrays, _ = strategy.aggregate_train(4, replies)
        self.assertEqual(logs.output, ["WARNING:flwr:fleet round 4: refusing node 2's parameters: tensor 'fc.bias' holds nan"])
        np.testing.assert_allclose(arrays["fc.weight"].numpy(), 2 * GOOD["fc.weight"])
        np.testing.assert_allclose(arrays["fc.bias"].numpy(), GOOD["fc.bias"])


    def test_server_momentum_spares_the_running_statistics(self) -> None:
        start = {"fc.weight": np.zeros((3, 2), np.float32), "bn.running_var": np.ones(3, np.float32)}
        strategy = ScreenedFedAvgM(server_momentum=0.5)
        strategy.expected = {"fc.weight": (3, 2), "bn.running_var": (3,)}
        # Every round the boxes move the weights by +1 and report a variance of 2; their
        # tensors come in another order than the global model's.
        for round in (1, 2):
            strategy.current = dict(start)
            trained = {"bn.running_var": np.full(3, 2, np.float32), "fc.weight": start["fc.weight"] + 1}
            arrays, _ = strategy.aggregate_train(round, [Reply(1, trained, 10)])
            start = {k: v.numpy() for k, v in arrays.items()}
        # Round 2's step: its own 1 plus half of round 1's; the variance: the boxes' 2 (with
        # momentum it would be 2.5).
        np.testing.assert_allclose(start["fc.weight"], np.full((3, 2), 2.5))
        np.testing.assert_allclose(start["bn.running_var"], np.full(3, 2.0))


    def test_the_server_learning_rate_scales_the_step(self) -> None:
        strategy = ScreenedFedAvgM(server_lr=1.5)
        strategy.expected = {"fc.weight": (3, 2), "bn.running_var": (3,)}
        strategy.current = {"fc.weight": np.zeros((3, 2), np.float32), "bn.running_var": np.ones(3, np.float32)}
        trained = {"fc.weight": np.ones((3, 2), np.float32), "bn.running_var": np.full(3, 2, np.float32)}
        arrays, _ = strategy.aggregate_train(1, [Reply(1, trained, 10)])
        np.testing.assert_allclose(arrays["fc.weight"].numpy(), np.full((3, 2), 1.5))
        np.testing.assert_allclose(arrays["bn.running_var"].numpy(), np.full(3, 2.0))

    def test_adaptive_optimizers_step_the_weights_and_pool_the_statistics(self) -> None:
        start = {
            "fc.weight": np.zeros((3, 2), np.float32),
            "bn.running_mean": np.zeros(2, np.float32),
            "bn.running_var": np.ones(2, np.float32),
        }
        # As in the pooled-variance check: box means 0 and 4 (weights 1:3), variances 1.
        one = dict(start, **{"fc.weight": np.ones((3, 2), np.float32)})
        two = dict(one, **{"bn.running_mean": np.full(2, 4, np.float32)})
        # Round 1 of FedAdam (beta 0.9, 0.99, tau 0.001) on a step of 1: m = 0.1, v = 0.01,
        # eta scaled by sqrt(1 - 0.99^2) / (1 - 0.9^2).
        adam = 0.1 * (1 - 0.99**2) ** 0.5 / (1 - 0.9**2) * 0.1 / (0.1 + 1e-3)
        # FedYogi: v = 0.01 as well (its sign term is -1), no bias correction; FedAdagrad
        # (no momentum): m = 1, v = 1.
        expected = {"adam": adam, "yogi": 0.1 * 0.1 / (0.1 + 1e-3), "adagrad": 0.1 * 1 / (1 + 1e-3)}
        for name, step in expected.items():
            strategy = ADAPTIVE[name](eta=0.1)
            strategy.expected = {k: v.shape for k, v in start.items()}
            strategy.current_arrays = dict(start)
            arrays, _ = strategy.aggregate_train(1, [Reply(1, one, 10), Reply(2, two, 30)])
            np.testing.assert_allclose(arrays["fc.weight"].numpy(), np.full((3, 2), step), rtol=1e-6, err_msg=name)
            np.testing.assert_allclose(arrays["bn.running_mean"].numpy(), np.full(2, 3.0), err_msg=name)
            np.testing.assert_allclose(arrays["bn.running_var"].numpy(), np.full(2, 4.0), err_msg=name)

    def test_the_run_config_chooses_the_strategy(self) -> None:
        base = {"server-optimizer": "avg", "proximal-mu": 0.0, "server-momentum": 0.0, "server-lr": 1.0, "lr": 0.01}
        chosen = lambda **changes: choose_strategy(dict(base, **changes), {})
        self.assertIs(type(chosen()), ScreenedFedAvg)
        self.assertIs(type(chosen(**{"proximal-mu": 1.0})), ScreenedFedProx)
        self.assertEqual(chosen(**{"server-lr": 1.5}).server_lr, 1.5)
        self.assertEqual(chosen(**{"server-momentum": 0.5}).server_momentum, 0.5)
        self.assertIs(type(chosen(**{"server-optimizer": "yogi", "server-lr": 0.003})), ADAPTIVE["yogi"])
        self.assertEqual(chosen(**{"server-optimizer": "adam", "server-lr": 0.003}).eta, 0.003)
        with self.assertRaisesRegex(ValueError, "server-optimizer must be 'avg', 'adam', 'yogi', 'adagrad', not 'sgd'"):
            chosen(**{"server-optimizer": "sgd"})
        with self.assertRaisesRegex(ValueError, "takes no proximal-mu or server-momentum"):
            chosen(**{"server-optimizer": "adam", "server-momentum": 0.5})
        with self.assertRaisesRegex(ValueError, "proximal-mu > 0 takes server-momentum 0 and server-lr 1"):
            chosen(**{"proximal-mu": 1.0, "server-lr": 2.0})

    def test_the_run_config_sets_the_boxes_jobs(self) -> None:
        base = {"trainable": "all", "local-epochs": 2, "lr": 0.005, "batch-size": 8, "optimizer": "sgd", "batch-norm": "batch"}
        self.assertEqual(train_settings(base)["logit-adjust"], 0.0)
        self.assertEqual(train_settings(dict(base, **{"logit-adjust": 1.5}))["logit-adjust"], 1.5)
        for bad in (-0.5, float("nan"), float("inf")):
            with self.assertRaisesRegex(ValueError, "logit-adjust must be a finite number of 0 or more"):
                train_settings(dict(base, **{"logit-adjust": bad}))
        with self.assertRaisesRegex(ValueError, "batch-norm must be 'batch' or 'running', not 'frozen'"):
            train_settings(dict(base, **{"batch-norm": "frozen"}))

    def test_batch_norms_train_fixed_after_the_configured_rounds(self) -> None:
        class Grid:
            def get_node_ids(self) -> list[int]:
                return [7]

        for name, strategy in (
            ("avg", ScreenedFedAvg(fix_batch_norm_after=2)),
            ("prox", ScreenedFedProx(fix_batch_norm_after=2, proximal_mu=1.0)),
            ("adam", ADAPTIVE["adam"](fix_batch_norm_after=2, eta=0.1)),
        ):
            strategy.min_available_nodes = strategy.min_train_nodes = 1
            # The messages themselves need a run; what the boxes would receive is the record.
            strategy._construct_messages = lambda content, nodes, kind: [content]
            config = ConfigRecord({"batch-norm": "batch", "lr": 0.1})
            modes = []
            for server_round in (1, 2, 3, 4):
                [sent] = strategy.configure_train(server_round, record(GOOD), config, Grid())
                modes.append(sent.config_records["config"]["batch-norm"])
            self.assertEqual(modes, ["batch", "batch", "running", "running"], name)
        self.assertEqual(ScreenedFedAvg().fix_after, 0)
        with self.assertRaisesRegex(ValueError, "fix-batch-norm-after must be 0 or more, not -1"):
            ScreenedFedAvg(fix_batch_norm_after=-1)

    def test_batch_norm_variances_pool_the_boxes_data(self) -> None:
        strategy = ScreenedFedAvg()
        strategy.expected = {"bn.running_mean": (2,), "bn.running_var": (2,)}
        # Box 1's data has mean 0 and variance 1 per channel, box 2's (three times as many
        # photos) mean 4 and variance 1: pooled, mean 3 and variance 1 + 0.25*9 + 0.75*1 = 4.
        one = {"bn.running_mean": np.zeros(2, np.float32), "bn.running_var": np.ones(2, np.float32)}
        two = {"bn.running_mean": np.full(2, 4, np.float32), "bn.running_var": np.ones(2, np.float32)}
        arrays, _ = strategy.aggregate_train(1, [Reply(1, one, 10), Reply(2, two, 30)])
        np.testing.assert_allclose(arrays["bn.running_mean"].numpy(), np.full(2, 3.0))
        np.testing.assert_allclose(arrays["bn.running_var"].numpy(), np.full(2, 4.0))

    def test_the_cosine_schedule_decays_over_the_rounds(self) -> None:
        self.assertEqual([round_lr("constant", 0.1, r, 4) for r in (1, 4)], [0.1, 0.1])
        rates = [round_lr("cosine", 0.1, r, 4) for r in (1, 2, 3, 4)]
        np.testing.assert_allclose(rates, [0.1, 0.1 * (1 + 0.5**0.5) / 2, 0.05, 0.1 * (1 - 0.5**0.5) / 2])
        with self.assertRaisesRegex(ValueError, "lr-schedule must be 'constant' or 'cosine', not 'linear'"):
            ScreenedFedAvg(schedule="linear")


class Averaging(unittest.TestCase):
    """The numpy averaging the replay harness runs (the ServerApp's statistics pooling)."""

    def test_fedavg_weights_the_boxes_and_scales_the_step(self) -> None:
        current = {"w": np.zeros(2, np.float32), "bn.running_var": np.ones(1, np.float32)}
        one = {"w": np.full(2, 1, np.float32), "bn.running_var": np.ones(1, np.float32)}
        two = {"w": np.full(2, 5, np.float32), "bn.running_var": np.ones(1, np.float32)}
        np.testing.assert_allclose(fedavg(current, [(one, 3), (two, 1)])["w"], np.full(2, 2.0))
        np.testing.assert_allclose(fedavg(current, [(one, 3), (two, 1)], 1.5)["w"], np.full(2, 3.0))
        # Statistics take the boxes' pooled values, never a server step.
        np.testing.assert_allclose(fedavg(current, [(one, 3), (two, 1)], 1.5)["bn.running_var"], [1.0])

    def test_scaffold_controls_follow_the_paper(self) -> None:
        start = {"w": np.array([1.0, 1.0], np.float32), "bn.running_mean": np.zeros(1, np.float32)}
        control = zero_control(start)
        self.assertEqual(list(control), ["w"])
        # c_i+ = c_i - c + (x - y_i) / (K lr): 4 steps at lr 0.5 moved w by (-2, 4).
        mine = {"w": np.array([0.5, 0.0], np.float32)}
        glob = {"w": np.array([0.25, 1.0], np.float32)}
        trained = {"w": np.array([3.0, -3.0], np.float32), "bn.running_mean": np.ones(1, np.float32)}
        updated = control_update(mine, glob, start, trained, 4, 0.5)
        np.testing.assert_allclose(updated["w"], [0.5 - 0.25 - 1.0, 0.0 - 1.0 + 2.0])
        np.testing.assert_allclose(control_offset(mine, glob)["w"], [-0.25, 1.0])
        with self.assertRaisesRegex(ValueError, "at least one update at a positive lr"):
            control_update(mine, glob, start, trained, 0, 0.5)

    def test_offsets_travel_as_base64_safetensors(self) -> None:
        import base64

        from safetensors.numpy import load

        encoded = encode_offset({"w": np.array([1.5, -2.0], np.float32)})
        np.testing.assert_array_equal(load(base64.b64decode(encoded))["w"], [1.5, -2.0])

    def test_carried_momentum_is_exact_under_a_constant_gradient(self) -> None:
        gradient, carried, lr, steps = np.array([1.0, -2.0]), np.array([0.5, 0.25]), 0.1, 4

        def sgd(weights: np.ndarray, buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            for _ in range(steps):
                buffer = 0.9 * buffer + gradient
                weights = weights - lr * buffer
            return weights, buffer

        # A job that kept its buffer, against the emulation: the shifted start, then a job
        # whose buffer starts at zero.
        kept, buffer = sgd(np.zeros(2), carried)
        momentum = CarriedMomentum("box", {"w": np.zeros(2, np.float32)}, 1)
        momentum.buffers[0] = {"w": carried}
        start = momentum.shifted(0, {"w": np.zeros(2)}, lr, steps)
        trained, _ = sgd(start["w"], np.zeros(2))
        np.testing.assert_allclose(trained, kept)
        momentum.update(0, start, {"w": trained}, lr, steps)
        np.testing.assert_allclose(momentum.buffers[0]["w"], buffer)
        with self.assertRaisesRegex(ValueError, "carry-momentum must be 'none', 'box' or 'average', not 'all'"):
            CarriedMomentum("all", {}, 1)

    def test_the_replay_refuses_unknown_settings(self) -> None:
        kind, settings = parse("fedavg local-epochs=8 scaffold=1")
        self.assertEqual((kind, settings["local-epochs"], settings["lr"]), ("fedavg", "8", 0.005))
        # The previous bench's setting: batch norms fixed after 3 rounds unless told otherwise.
        self.assertEqual(settings["fix-batch-norm-after"], 3)
        self.assertEqual(parse("fedavg fix-batch-norm-after=0")[1]["fix-batch-norm-after"], "0")
        with self.assertRaisesRegex(ValueError, "unknown setting 'momentum=0.5'"):
            parse("fedavg momentum=0.5")
        with self.assertRaisesRegex(ValueError, "the kind must be fedavg, pooled or single"):
            parse("fedsgd")


class LiveBox(unittest.TestCase):
    """Needs a running `sprout serve` with a model of batch-norm layers."""

    def setUp(self) -> None:
        missing = [k for k in ("SPROUT_FLEET_URL", "SPROUT_FLEET_TOKEN", "SPROUT_FLEET_MODEL") if k not in os.environ]
        if missing:
            self.fail(f"set {missing}: the address, a train token and a model of a running sprout serve")
        self.url, self.model = os.environ["SPROUT_FLEET_URL"], os.environ["SPROUT_FLEET_MODEL"]
        self.service = Service(self.url, os.environ["SPROUT_FLEET_TOKEN"])
        self.version = self.service.current_version(self.model)

    def test_the_token_is_what_lets_the_client_in(self) -> None:
        with self.assertRaisesRegex(ServiceError, " 401 "):
            Service(self.url, "sprout_not-a-token").current_version(self.model)

    def test_the_head_travels_with_the_running_statistics(self) -> None:
        head = self.service.weights(self.model, self.version, "head")
        stats = [name for name in head if name.endswith(("running_mean", "running_var"))]
        self.assertTrue(stats, f"no batch-norm statistics in {sorted(head)}")
        self.assertLess(len(head), len(self.service.weights(self.model, self.version)))

    def test_bad_uploads_are_refused_naming_the_tensor(self) -> None:
        head = self.service.weights(self.model, self.version, "head")
        name = sorted(head)[0]
        before = self.service.current_version(self.model)
        nan = dict(head, **{name: np.full(head[name].shape, np.nan, np.float32)})
        with self.assertRaisesRegex(ServiceError, f" 422 .*'{name}'.*NaN"):
            self.service.apply(self.model, self.version, nan)
        wide = dict(head, **{name: np.zeros(head[name].shape + (2,), np.float32)})
        with self.assertRaisesRegex(ServiceError, f" 422 .*'{name}': shape"):
            self.service.evaluate(self.model, self.version, "val", wide)
        self.assertEqual(self.service.current_version(self.model), before)

    def test_a_rounds_versions_can_be_deleted_but_not_the_current_one(self) -> None:
        head = self.service.weights(self.model, self.version, "head")
        made = self.service.apply(self.model, self.version, head)
        self.service.delete_version(self.model, made)
        with self.assertRaisesRegex(ServiceError, " 404 "):
            self.service.weights(self.model, made)
        with self.assertRaisesRegex(ServiceError, " 409 .*current version"):
            self.service.delete_version(self.model, self.version)


if __name__ == "__main__":
    unittest.main()
