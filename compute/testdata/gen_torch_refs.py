#!/usr/bin/python3
"""Writes torch_refs.json: expected values computed by PyTorch itself for
compute's optimizers and layers (see torch_refs_test.go, which reads it).

Run from the repository root with the interpreter that has PyTorch 1.13:

    /usr/bin/python3 compute/testdata/gen_torch_refs.py

Inputs are not drawn from torch's RNG but built from a formula that Go
reproduces bit for bit (gen_values below, genSpec.values in compute/torch_refs_test.go):

    value(i) = ((i*389 + 17 + 71*seed) % m - h) / h * scale + offset,  h = (m-1)/2

computed in float64 and rounded to float32. With m = 1009 (prime, 389 coprime
with it) the first 1009 values of a tensor are distinct, so max pooling sees
no ties unless a case asks for them with a small m.

Floats are written as the shortest decimal that reads back as the same
float32. Everything runs on one thread, so the output is the same run to run
on one machine (TestTorchRefsUpToDate compares a fresh run with the checked-in
file when TEMPOTRAIN_REQUIRE_TORCH=1).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def gen_values(n, seed, m=1009, scale=1.0, offset=0.0):
    h = (m - 1) / 2
    return [((i * 389 + 17 + 71 * seed) % m - h) / h * scale + offset for i in range(n)]


def spec(seed, m=1009, scale=1.0, offset=0.0):
    return {"seed": seed, "m": m, "scale": scale, "offset": offset}


def tensor(shape, s):
    n = math.prod(shape)
    v = gen_values(n, s["seed"], s["m"], s["scale"], s["offset"])
    return torch.tensor(v, dtype=torch.float32).reshape(shape)


class F32List(list):
    """A list of float32 values, written with float32's shortest decimals."""


def flat(t):
    return F32List(float(v) for v in t.detach().reshape(-1).numpy())


# ---------------------------------------------------------------- optimizers

# Configs are compute.OptimizerConfig as JSON; torch gets only the fields the
# config sets, so fields left out check that our defaults are PyTorch's.
OPTIM_CASES = [
    ("sgd_wd", {"name": "sgd", "weight_decay": 0.01}),
    ("sgd_momentum", {"name": "sgd", "momentum": 0.9}),
    ("sgd_momentum_dampening_wd", {"name": "sgd", "momentum": 0.8, "dampening": 0.25, "weight_decay": 0.05}),
    ("sgd_nesterov", {"name": "sgd", "momentum": 0.9, "nesterov": True}),
    ("sgd_nesterov_wd", {"name": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("adam", {"name": "adam"}),
    ("adam_wd_betas_eps", {"name": "adam", "weight_decay": 0.05, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}),
    ("adamw_default_wd", {"name": "adamw"}),
    ("adamw_wd", {"name": "adamw", "weight_decay": 0.1, "beta1": 0.85, "beta2": 0.995}),
]

OPTIM_N = 37  # two 16-wide vectors and a tail
SGD_LRS = [0.1, 0.05, 0.1, 0.02, 0.08]
ADAM_LRS = [0.01, 0.005, 0.01, 0.002, 0.008]


def torch_optimizer(cfg, param, lr):
    name = cfg["name"]
    kw = {}
    if "weight_decay" in cfg:
        kw["weight_decay"] = cfg["weight_decay"]
    if name == "sgd":
        for k in ("momentum", "dampening", "nesterov"):
            if k in cfg:
                kw[k] = cfg[k]
        return torch.optim.SGD([param], lr=lr, **kw)
    if "beta1" in cfg or "beta2" in cfg:
        kw["betas"] = (cfg.get("beta1", 0.9), cfg.get("beta2", 0.999))
    if "eps" in cfg:
        kw["eps"] = cfg["eps"]
    cls = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    return cls([param], lr=lr, **kw)


def optim_cases():
    out = []
    for name, cfg in OPTIM_CASES:
        lrs = SGD_LRS if cfg["name"] == "sgd" else ADAM_LRS
        p0 = spec(1)
        grads = [spec(10 + t, scale=0.5) for t in range(len(lrs))]
        param = torch.nn.Parameter(tensor([OPTIM_N], p0))
        opt = torch_optimizer(cfg, param, lrs[0])
        params = []
        for t, lr in enumerate(lrs):
            for g in opt.param_groups:
                g["lr"] = lr
            param.grad = tensor([OPTIM_N], grads[t])
            opt.step()
            params.append(flat(param))
        out.append({"name": name, "config": cfg, "n": OPTIM_N, "p0": p0, "grads": grads, "lrs": lrs,
                    "params": params})
    return out


# ------------------------------------------------------------- convolution

# Shapes are compute.ConvShape's input fields. pool fuses a 2×2 max pooling of
# stride 2 after the activation (compute's ConvPool2D).
CONV_CASES = [
    ("k3_s1_p0", dict(n=2, C=3, H=7, W=7, K=4, KH=3, KW=3, Stride=1, Pad=0), dict()),
    ("k3_s1_p1_relu", dict(n=2, C=2, H=6, W=5, K=3, KH=3, KW=3, Stride=1, Pad=1), dict(relu=True)),
    ("k3_s2_p1", dict(n=2, C=2, H=7, W=7, K=3, KH=3, KW=3, Stride=2, Pad=1), dict()),
    ("k5_s2_p2_nobias", dict(n=2, C=2, H=9, W=8, K=3, KH=5, KW=5, Stride=2, Pad=2), dict(bias=False)),
    ("k1_s1_p0_pointwise", dict(n=2, C=4, H=5, W=5, K=3, KH=1, KW=1, Stride=1, Pad=0), dict()),
    ("k1_s2_p0", dict(n=2, C=3, H=6, W=6, K=2, KH=1, KW=1, Stride=2, Pad=0), dict()),
    ("k3x2_s2_p1_rect", dict(n=2, C=2, H=8, W=7, K=3, KH=3, KW=2, Stride=2, Pad=1), dict()),
    ("k7_s2_p3_stem", dict(n=1, C=1, H=12, W=12, K=4, KH=7, KW=7, Stride=2, Pad=3), dict(relu=True)),
    ("k3_s1_p1_relu_pool", dict(n=2, C=3, H=8, W=8, K=4, KH=3, KW=3, Stride=1, Pad=1), dict(relu=True, pool=True)),
    ("k3_s1_p0_relu_pool_odd", dict(n=2, C=2, H=9, W=9, K=3, KH=3, KW=3, Stride=1, Pad=0), dict(relu=True, pool=True)),
    # 19 pooled columns: one full 16-wide AVX-512 round and a masked tail.
    ("k3_s1_p1_relu_pool_wide", dict(n=1, C=1, H=4, W=38, K=2, KH=3, KW=3, Stride=1, Pad=1), dict(relu=True, pool=True)),
    ("k3_s1_p1_pool_noact", dict(n=2, C=2, H=6, W=6, K=3, KH=3, KW=3, Stride=1, Pad=1), dict(pool=True)),
]


def conv_cases():
    out = []
    for name, s, opts in CONV_CASES:
        relu, pool, bias = opts.get("relu", False), opts.get("pool", False), opts.get("bias", True)
        sx, sw, sb = spec(2), spec(3, scale=0.5), spec(4, scale=0.25)
        x = tensor([s["n"], s["C"], s["H"], s["W"]], sx).requires_grad_()
        w = tensor([s["K"], s["C"], s["KH"], s["KW"]], sw).requires_grad_()
        b = tensor([s["K"]], sb).requires_grad_() if bias else None
        y = F.conv2d(x, w, b, stride=s["Stride"], padding=s["Pad"])
        if relu:
            y = F.relu(y)
        if pool:
            y = F.max_pool2d(y, 2, 2)
        sdy = spec(5)
        y.backward(tensor(list(y.shape), sdy))
        c = {"name": name, "shape": s, "relu": relu, "pool": pool, "bias": bias,
             "x": sx, "w": sw, "b": sb, "dy": sdy, "y_shape": list(y.shape),
             "y": flat(y), "dx": flat(x.grad), "dw": flat(w.grad)}
        if bias:
            c["db"] = flat(b.grad)
        out.append(c)
    return out


# ----------------------------------------------------------------- pooling

# Shapes are compute.PoolShape's input fields over x [n, C, H, W]. A small m
# makes ties: PyTorch and compute both take a window's first maximum (rows,
# then columns) and route its gradient there.
POOL_CASES = [
    ("max_2x2_s2", dict(n=2, C=2, H=4, W=36, KH=2, KW=2, Stride=2, Pad=0), "max", 1009),
    ("max_2x2_s2_odd", dict(n=1, C=2, H=7, W=9, KH=2, KW=2, Stride=2, Pad=0), "max", 1009),
    ("max_2x2_s2_ties", dict(n=2, C=2, H=6, W=6, KH=2, KW=2, Stride=2, Pad=0), "max", 3),
    ("max_3x3_s2_p1", dict(n=2, C=2, H=9, W=9, KH=3, KW=3, Stride=2, Pad=1), "max", 1009),
    ("max_3x3_s1_p1", dict(n=1, C=2, H=6, W=7, KH=3, KW=3, Stride=1, Pad=1), "max", 1009),
    ("max_3x3_s2_p1_ties", dict(n=1, C=2, H=8, W=8, KH=3, KW=3, Stride=2, Pad=1), "max", 4),
    ("max_3x2_s1_p0_rect", dict(n=1, C=2, H=6, W=6, KH=3, KW=2, Stride=1, Pad=0), "max", 1009),
    ("avg_2x2_s2", dict(n=1, C=2, H=6, W=8, KH=2, KW=2, Stride=2, Pad=0), "avg", 1009),
    ("avg_3x3_s2_p1", dict(n=1, C=2, H=9, W=9, KH=3, KW=3, Stride=2, Pad=1), "avg", 1009),
    ("avg_3x3_s1_p1", dict(n=1, C=2, H=5, W=6, KH=3, KW=3, Stride=1, Pad=1), "avg", 1009),
    ("avg_global", dict(n=2, C=3, H=4, W=4, KH=4, KW=4, Stride=1, Pad=0), "avg", 1009),
]


def pool_cases():
    out = []
    for name, s, kind, m in POOL_CASES:
        sx = spec(6, m=m)
        x = tensor([s["n"], s["C"], s["H"], s["W"]], sx).requires_grad_()
        k, st, p = (s["KH"], s["KW"]), s["Stride"], s["Pad"]
        if kind == "max":
            y = F.max_pool2d(x, k, st, p)
        else:
            y = F.avg_pool2d(x, k, st, p, count_include_pad=True)
        sdy = spec(7)
        y.backward(tensor(list(y.shape), sdy))
        out.append({"name": name, "shape": s, "kind": kind, "x": sx, "dy": sdy, "y_shape": list(y.shape),
                    "y": flat(y), "dx": flat(x.grad)})
    return out


# -------------------------------------------------------------- batch norm

# Two training steps (forward, saved statistics, running statistics,
# backward), then an evaluation forward with the running statistics they
# left.
BN_CASES = [
    ("bn2d_default", [3, 3, 4, 4], 0.1, 1e-5),
    ("bn2d_momentum_eps", [2, 4, 3, 3], 0.3, 1e-3),
    ("bn2d_one_sample", [1, 2, 4, 3], 0.1, 1e-5),
    ("bn1d", [6, 5], 0.1, 1e-5),
]


def bn_cases():
    out = []
    for name, shape, momentum, eps in BN_CASES:
        c = shape[1]
        sg, sb = spec(20, scale=0.5, offset=1.0), spec(21, scale=0.5)
        srm, srv = spec(22, scale=0.5), spec(23, scale=0.5, offset=1.0)
        gamma, beta = tensor([c], sg), tensor([c], sb)
        rm, rv = tensor([c], srm), tensor([c], srv)
        steps = []
        for t in range(2):
            sx = spec(30 + t, scale=2.0, offset=0.5 * (t + 1))
            sdy = spec(40 + t)
            x = tensor(shape, sx).requires_grad_()
            g = gamma.clone().requires_grad_()
            b = beta.clone().requires_grad_()
            # The statistics the backward uses, from the same kernel.
            _, save_mean, save_invstd = torch.native_batch_norm(
                x.detach(), gamma, beta, rm.clone(), rv.clone(), True, momentum, eps)
            y = F.batch_norm(x, rm, rv, g, b, training=True, momentum=momentum, eps=eps)
            y.backward(tensor(shape, sdy))
            steps.append({"x": sx, "dy": sdy, "y": flat(y), "mean": flat(save_mean), "invstd": flat(save_invstd),
                          "running_mean": flat(rm), "running_var": flat(rv),
                          "dx": flat(x.grad), "dgamma": flat(g.grad), "dbeta": flat(b.grad)})
        sxe = spec(35, scale=1.5)
        ye = F.batch_norm(tensor(shape, sxe), rm, rv, gamma, beta, training=False, momentum=momentum, eps=eps)
        out.append({"name": name, "shape": shape, "momentum": momentum, "eps": eps,
                    "gamma": sg, "beta": sb, "running_mean": srm, "running_var": srv,
                    "train": steps, "eval_x": sxe, "eval_y": flat(ye)})
    return out


# ------------------------------------------------------------------ output

def f32(v):
    if not math.isfinite(v):
        raise ValueError(f"non-finite value {v}")
    p = np.format_float_positional(np.float32(v), unique=True, trim="-")
    e = np.format_float_scientific(np.float32(v), unique=True, trim="-")
    return e if len(e) < len(p) else p


def dump(v, indent=0):
    """JSON with every list of numbers on one line: F32Lists with float32's
    shortest decimals, other floats (hyper-parameters) with float64's."""
    pad = "  " * indent
    if isinstance(v, dict) and all(isinstance(x, (bool, int, float, str)) for x in v.values()):
        return pad + "{" + ", ".join(f"{dump_key(k)}: {dump(x).lstrip()}" for k, x in v.items()) + "}"
    if isinstance(v, dict):
        items = [f'{pad}  {dump_key(k)}: {dump(x, indent + 1).lstrip()}' for k, x in v.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(v, list):
        if isinstance(v, F32List):
            return pad + "[" + ", ".join(f32(x) for x in v) + "]"
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            return pad + "[" + ", ".join(num(x) for x in v) + "]"
        return pad + "[\n" + ",\n".join(dump(x, indent + 1) for x in v) + "\n" + pad + "]"
    if isinstance(v, bool):
        return pad + ("true" if v else "false")
    if isinstance(v, (int, float)):
        return pad + num(v)
    if isinstance(v, str):
        return pad + dump_key(v)
    raise TypeError(type(v))


def dump_key(s):
    return json.dumps(s)


def num(x):
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x}")
    return repr(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_refs.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    refs = {
        "generator": "compute/testdata/gen_torch_refs.py",
        "torch_version": torch.__version__.split("+")[0],
        "input_rule": "value(i) = float32(((i*389 + 17 + 71*seed) % m - h) / h * scale + offset), h = (m-1)/2, in float64",
        "gen_check": [{"spec": s, "values": F32List(float(np.float32(v)) for v in gen_values(40, **s))}
                      for s in (spec(0), spec(9, m=7, scale=0.3, offset=-0.125), spec(31, scale=2.0, offset=1.0))],
        "optim": optim_cases(),
        "conv": conv_cases(),
        "pool": pool_cases(),
        "batchnorm": bn_cases(),
    }
    text = dump(refs) + "\n"
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out} ({len(text)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
