"""nn.Module on tpu: moving, tied weights, state_dict, save/load."""
import io

import torch
import torch.nn as nn


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(8, 16, bias=False)
        self.head = nn.Linear(16, 8, bias=False)
        self.head.weight = nn.Parameter(self.emb.weight.t().contiguous())
        self.proj = nn.Linear(8, 8)
        self.out = nn.Linear(8, 8)
        self.out.weight = self.proj.weight  # tied

    def forward(self, x):
        return self.out(self.proj(x))


def test_module_to_tpu_keeps_tied_parameters_tied():
    m = Tied()
    w_obj = m.proj.weight
    m.to("tpu")
    assert m.out.weight is m.proj.weight
    assert m.proj.weight is w_obj          # swapped in place, same Parameter
    assert m.proj.weight.device.type == "tpu"
    assert isinstance(m.proj.weight, nn.Parameter)
    assert len(list(m.parameters())) == len({id(p) for p in m.parameters()})
    m2 = Tied().tpu()                       # Module.tpu()
    assert m2.out.weight is m2.proj.weight and m2.out.weight.is_tpu
    m.to("cpu")
    assert m.out.weight is m.proj.weight and m.out.weight.device.type == "cpu"


def test_optimizer_created_before_move_still_updates():
    torch.manual_seed(0)
    m = nn.Linear(4, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.to("tpu")
    before = m.weight.detach().cpu().clone()
    loss = m(torch.ones(3, 4, device="tpu")).sum()
    loss.backward()
    opt.step()
    assert not torch.equal(m.weight.detach().cpu(), before)


def test_state_dict_and_save_load_round_trip():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).to("tpu")
    sd = m.state_dict()
    assert all(v.device.type == "tpu" for v in sd.values())
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    assert all(v.device.type == "cpu" for v in on_cpu.values())
    for k in sd:
        assert torch.equal(on_cpu[k], sd[k].cpu())
    buf.seek(0)
    on_tpu = torch.load(buf)                # default location restores tpu tensors
    assert all(v.device.type == "tpu" for v in on_tpu.values())
    for k in sd:
        assert torch.equal(on_tpu[k].cpu(), sd[k].cpu())
    m2 = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).to("tpu")
    m2.load_state_dict(on_tpu)
    x = torch.randn(5, 4, device="tpu")
    assert torch.equal(m(x).cpu(), m2(x).cpu())


def test_save_keeps_views_as_views():
    x = torch.arange(10.0).to("tpu")
    buf = io.BytesIO()
    torch.save({"a": x, "b": x[1:]}, buf)
    buf.seek(0)
    d = torch.load(buf)
    assert d["a"].device.type == "tpu" and d["b"].device.type == "tpu"
    assert d["b"].untyped_storage().data_ptr() == d["a"].untyped_storage().data_ptr()
    assert d["b"].storage_offset() == 1
    d["a"][5].fill_(-1.0)
    assert d["b"][4].item() == -1.0
    buf.seek(0)
    c = torch.load(buf, map_location="cpu")
    assert c["b"].untyped_storage().data_ptr() == c["a"].untyped_storage().data_ptr()


def test_storage_to_tpu():
    s = torch.arange(4, dtype=torch.float32).untyped_storage()
    t = s.tpu()
    assert t.device.type == "tpu" and t.nbytes() == 16
    back = torch.empty(0).set_(t.cpu(), 0, (4,), (1,))
    assert back.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert s.to(device="tpu").device.type == "tpu"


def test_move_while_an_autograd_graph_holds_the_weights_keeps_ties():
    """swap_tensors refuses parameters a live graph references; the move
    still works and ties survive."""
    m = Tied()
    loss = m(torch.randn(2, 8)).sum()       # the graph holds the weights
    m.to("tpu")
    assert m.out.weight is m.proj.weight
    assert m.out.weight.device.type == "tpu"
    assert m(torch.randn(2, 8, device="tpu")).shape == (2, 8)
    del loss
