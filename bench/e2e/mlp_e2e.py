"""PyTorch's side of `go run ./bench/e2e -job mlp` (Debian's torch 1.13 with
pandas): a user's whole tabular-mlp job from CSV files, timed from process
start.

    python3 mlp_e2e.py TRAIN_CSV VALID_CSV LABEL CONFIG_JSON MODEL_OUT

does what tabular-mlp does with its default preprocessors: reads both CSV
files with pandas, imputes missing numbers with the train mean and
standardises every feature with the train mean and standard deviation
(ddof 0, as scikit-learn's StandardScaler), trains the MLP (Linear+ReLU per
hidden size, then Linear to the classes; PyTorch's default Linear init, the
U(±1/√fan_in) family tabular-mlp uses) with cross-entropy, SGD with
momentum (or Adam), the config's lr, batch size and epochs, the rows
shuffled each epoch; after every epoch the train loss and accuracy over the
epoch's batches and the valid loss and accuracy; saves the model's
state_dict with the scaler's mean and std to MODEL_OUT and prints one JSON
line: {"seconds_in_script", "read_seconds", "train_seconds", "train_loss",
"train_accuracy", "valid_loss", "valid_accuracy", "version"}.
"""
import time

T0 = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402


def main():
    train_csv, valid_csv, label, cfg, out = sys.argv[1:6]
    cfg = json.loads(cfg)
    torch.set_num_threads(cfg.get("threads", 2))
    torch.manual_seed(cfg.get("seed", 0))

    t_read = time.perf_counter()
    tr = pd.read_csv(train_csv)
    va = pd.read_csv(valid_csv)
    feats = [c for c in tr.columns if c != label]
    xtr = tr[feats].to_numpy(dtype=np.float64)
    xva = va[feats].to_numpy(dtype=np.float64)
    mean = np.nanmean(xtr, axis=0)
    xtr = np.where(np.isnan(xtr), mean, xtr)
    xva = np.where(np.isnan(xva), mean, xva)
    std = xtr.std(axis=0)
    std[std == 0] = 1
    xtr = torch.from_numpy(((xtr - mean) / std).astype(np.float32))
    xva = torch.from_numpy(((xva - mean) / std).astype(np.float32))
    classes = np.unique(tr[label].to_numpy())
    ytr = torch.from_numpy(np.searchsorted(classes, tr[label].to_numpy()))
    yva = torch.from_numpy(np.searchsorted(classes, va[label].to_numpy()))

    t_train = time.perf_counter()
    layers, width = [], len(feats)
    for h in cfg["hidden"]:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, len(classes)))
    model = nn.Sequential(*layers)
    if cfg["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg.get("momentum", 0.9))
    loss_fn = nn.CrossEntropyLoss()
    batch, n = cfg["batch_size"], len(ytr)
    hist = []
    for epoch in range(cfg["epochs"]):
        model.train()
        perm = torch.randperm(n)
        loss_sum, hits = 0.0, 0
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            xb, yb = xtr[idx], ytr[idx]
            outb = model(xb)
            loss = loss_fn(outb, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            hits += (outb.argmax(1) == yb).sum().item()
        model.eval()
        with torch.no_grad():
            outv = model(xva)
            vloss = loss_fn(outv, yva).item()
            vacc = (outv.argmax(1) == yva).float().mean().item()
        hist.append({"epoch": epoch + 1, "train_loss": loss_sum / n, "train_accuracy": hits / n,
                     "valid_loss": vloss, "valid_accuracy": vacc})
    torch.save({"model": model.state_dict(), "mean": mean, "std": std, "classes": classes}, out)
    t_end = time.perf_counter()
    last = hist[-1]
    print(json.dumps({
        "seconds_in_script": t_end - T0,
        "read_seconds": t_train - t_read,
        "train_seconds": t_end - t_train,
        "train_loss": last["train_loss"],
        "train_accuracy": last["train_accuracy"],
        "valid_loss": last["valid_loss"],
        "valid_accuracy": last["valid_accuracy"],
        "version": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
