"""LeafNet in PyTorch eager, under sprout-zoo's parameter names, for `cargo xtask bench cpu`.

Loads sprout's safetensors export (`sprout export MODEL --format safetensors`), then either
checks its logits against sprout's (`check`) or times training steps / inference (`time`),
printing one `key value` line per result. Needs torch, numpy and safetensors.
"""

import argparse
import statistics
import sys
import time

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

# (expansion t, output channels c, blocks n, stride s of the first block), as in leafnet.rs.
STAGES = [(1, 8, 1, 1), (6, 16, 2, 2), (6, 24, 2, 2), (6, 32, 2, 2), (6, 48, 2, 1)]
STEM, LAST, CLASSES, SIZE = 16, 192, 3, 64


def conv_bn(c_in, c_out, kernel, stride=1, groups=1, act=True):
    layers = [
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out, eps=1e-5, momentum=0.1),
    ]
    return nn.Sequential(*layers, nn.ReLU6()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c_in, c_out, stride, t):
        super().__init__()
        hidden = c_in * t
        layers = [conv_bn(c_in, hidden, 1)] if t != 1 else []
        layers.append(conv_bn(hidden, hidden, 3, stride, groups=hidden))
        # The projection: a bare convolution and batch norm, numbered on from the others.
        project = conv_bn(hidden, c_out, 1, act=False)
        layers.extend([project[0], project[1]])
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        return x + self.conv(x) if self.residual else self.conv(x)


class LeafNet(nn.Module):
    def __init__(self):
        super().__init__()
        features, c = [conv_bn(3, STEM, 3, 2)], STEM
        for t, out, n, s in STAGES:
            for block in range(n):
                features.append(InvertedResidual(c, out, s if block == 0 else 1, t))
                c = out
        features.append(conv_bn(c, LAST, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(LAST, CLASSES))

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


def load(weights):
    model = LeafNet()
    missing, unexpected = model.load_state_dict(load_file(weights), strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        sys.exit(f"{weights} does not match LeafNet: missing {missing}, unexpected {unexpected}")
    return model


def check(args):
    model = load(args.weights).eval()
    with torch.no_grad():
        ours = model(torch.from_numpy(np.load(args.input))).numpy()
    theirs = np.load(args.logits)
    if ours.shape != theirs.shape:
        sys.exit(f"logits of shape {ours.shape}, sprout's {theirs.shape}")
    # Relative to how much the logits vary between samples, not to their size: a backbone
    # that barely moves them behind a large head bias must not pass unnoticed.
    spread = np.abs(theirs - theirs.mean(axis=0)).max()
    print("max_rel_diff", float(np.abs(ours - theirs).max() / spread) if spread > 0 else np.inf)


def time_steps(args):
    model = load(args.weights)
    x = torch.randn(args.batch, 3, SIZE, SIZE)
    if args.mode == "infer":
        model.eval()

        def step():
            with torch.no_grad():
                model(x)
    else:
        model.train()
        if args.mode == "head":
            # A frozen backbone's batch norms normalise with their running statistics, as
            # sprout's do when their parameters are not trained.
            model.features.eval()
        for name, p in model.named_parameters():
            p.requires_grad_(args.mode == "all" or name.startswith("classifier."))
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=args.weight_decay)
        y = torch.randint(0, CLASSES, (args.batch,))
        loss_fn = nn.CrossEntropyLoss()

        def step():
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()

    for _ in range(args.warmup):
        step()
    rates = []
    for _ in range(args.reps):
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        rates.append(args.batch * args.steps / (time.perf_counter() - start))
    print("img_per_s", statistics.median(rates))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="max difference of our logits to sprout's, relative")
    c.add_argument("--weights", required=True)
    c.add_argument("--input", required=True, help="float32 .npy [N, 3, 64, 64]")
    c.add_argument("--logits", required=True, help="sprout run's float32 .npy [N, 3]")
    t = sub.add_parser("time", help="median images/s of training steps or inference")
    t.add_argument("--weights", required=True)
    t.add_argument("--mode", choices=["head", "all", "infer"], required=True)
    for flag in ["--batch", "--steps", "--warmup", "--reps", "--threads"]:
        t.add_argument(flag, type=int, required=True)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--weight-decay", type=float, default=0.01)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.command == "check":
        check(args)
    else:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
        time_steps(args)


if __name__ == "__main__":
    main()
