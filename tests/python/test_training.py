"""Training parity: the same model, seed and optimizer on tpu and on CPU give
the same losses at every step (HIGHEST precision); runs are bitwise
reproducible, also across worker thread counts; nothing recompiles after the
first steps."""
import json

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import torchtpu
from torchtpu import _C
from conftest import run_python

STEPS = 50


def _mlp():
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, 4))


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 32)
        self.enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 50)

    def forward(self, tokens):
        return self.head(self.enc(self.emb(tokens)))


def _train(model_fn, data_fn, loss_fn, device, steps=STEPS, clip=True):
    torch.manual_seed(0)
    model = model_fn().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    g = torch.Generator().manual_seed(1)
    losses, compiles = [], []
    for _ in range(steps):
        x, y = data_fn(g)
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if device == "tpu":
            compiles.append(_C.stats()["compiles"])
    return losses, compiles, model


def _mlp_data(g):
    return torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)


def _block_data(g):
    t = torch.randint(0, 50, (4, 12), generator=g)
    return t, torch.roll(t, 1, dims=1)


def _ce(out, y):
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _check_parity(tpu, cpu):
    for step, (a, b) in enumerate(zip(tpu, cpu)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {step}: tpu {a} cpu {b}"


@pytest.mark.slow
def test_mlp_adamw_matches_cpu_and_stops_compiling():
    torchtpu.metrics.reset()
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        tpu, compiles, _ = _train(_mlp, _mlp_data, _ce, "tpu")
    cpu, _, _ = _train(_mlp, _mlp_data, _ce, "cpu")
    _check_parity(tpu, cpu)
    assert compiles[-1] == compiles[2], "recompiled after step 2"
    assert torchtpu.metrics.fallback_counts() == {}


@pytest.mark.slow
def test_transformer_block_adamw_matches_cpu():
    torchtpu.metrics.reset()
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        tpu, compiles, _ = _train(_Block, _block_data, _ce, "tpu")
    cpu, _, _ = _train(_Block, _block_data, _ce, "cpu")
    _check_parity(tpu, cpu)
    assert compiles[-1] == compiles[2], "recompiled after step 2"
    assert torchtpu.metrics.fallback_counts() == {}


_REPRO = """
import hashlib, json, torch, torchtpu, sys
sys.path.insert(0, 'tests/python')
from test_training import _train, _Block, _block_data, _ce
losses, _, model = _train(_Block, _block_data, _ce, 'tpu', steps=8)
h = hashlib.sha256()
for p in model.parameters():
    h.update(p.detach().cpu().numpy().tobytes())
print(json.dumps({'losses': [float(x).hex() for x in losses], 'params': h.hexdigest()}))
"""


@pytest.mark.slow
def test_training_is_bitwise_reproducible_across_runs_and_threads():
    runs = []
    for threads in ("1", "2", "2"):
        r = run_python(_REPRO, env={"TORCHTPU_NUM_THREADS": threads}, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert runs[0] == runs[1] == runs[2]


class _DtypeLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.log = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else [out]
        dts = tuple(o.dtype for o in outs if isinstance(o, torch.Tensor))
        name = str(func)
        if not name.startswith(("aten.detach", "aten._to_copy", "aten.clone", "aten.copy_",
                                "aten.empty", "aten._local_scalar")):
            self.log.append((name, dts))
        return out


class _AmpNet(nn.Module):
    """Ops from all three autocast policies (lower precision, fp32, promote)
    and ops autocast leaves alone."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.norm(self.a(x)))
        h = torch.cat([h, h.float()], dim=-1)[..., :32]
        o = self.b(h)
        return torch.log_softmax(o, dim=-1) + torch.mm(o, o.t()).sum()


def test_autocast_casts_like_cpu_autocast():
    torch.manual_seed(0)
    model = _AmpNet()
    x = torch.randn(4, 16)
    logs = {}
    for device in ("cpu", "tpu"):
        m = model.to(device)
        with torch.autocast(device, dtype=torch.bfloat16), torch.no_grad(), _DtypeLog() as d:
            m(x.to(device))
        logs[device] = d.log
    cpu_dtypes = [dts for _, dts in logs["cpu"]]
    tpu_dtypes = [dts for _, dts in logs["tpu"]]
    assert len(logs["cpu"]) > 10
    assert [n for n, _ in logs["tpu"]] == [n for n, _ in logs["cpu"]]
    assert tpu_dtypes == cpu_dtypes
