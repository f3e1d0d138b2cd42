"""tpu tensors behave like PyTorch tensors: transfer, views, copies, dtypes."""
import pytest
import torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_and_creation(dtype):
    cpu = (torch.arange(24).reshape(2, 3, 4) % 5).to(dtype)
    t = cpu.to("tpu")
    assert t.device.type == "tpu" and t.dtype == dtype and t.shape == cpu.shape
    assert torch.equal(t.cpu(), cpu)
    assert torch.equal(torch.zeros(3, dtype=dtype, device="tpu").cpu(), torch.zeros(3, dtype=dtype))
    assert torch.equal(torch.ones(2, 2, dtype=dtype, device="tpu").cpu(), torch.ones(2, 2, dtype=dtype))
    assert torch.equal(torch.full((2,), 1, dtype=dtype, device="tpu").cpu(), torch.full((2,), 1, dtype=dtype))
    assert torch.ones_like(t).cpu().to(torch.float32).sum().item() == 24
    e = torch.empty(2, 3, dtype=dtype, device="tpu")
    assert e.shape == (2, 3) and e.dtype == dtype
    es = torch.empty_strided((2, 3), (1, 2), dtype=dtype, device="tpu")
    assert es.stride() == (1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64])
def test_arithmetic_dtypes(dtype):
    a = (torch.arange(12).reshape(3, 4) % 7 + 1).to(dtype)
    b = (torch.arange(12).reshape(3, 4) % 3 + 1).to(dtype)
    ta, tb = a.to("tpu"), b.to("tpu")
    for f in (torch.add, torch.sub, torch.mul):
        assert torch.equal(f(ta, tb).cpu(), f(a, b)), f
    torch.testing.assert_close(torch.div(ta, tb).cpu(), torch.div(a, b))
    assert torch.equal((-ta).cpu(), -a)
    if dtype.is_floating_point:
        torch.testing.assert_close(ta.exp().cpu(), a.exp())
    assert torch.equal(ta.relu().cpu(), a.relu())
    assert torch.equal(ta.sum().cpu(), a.sum())


def test_item_tolist_repr():
    x = torch.tensor([[1.5, 2.0], [3.0, -4.0]]).to("tpu")
    assert x[1, 1].item() == -4.0
    assert x.tolist() == [[1.5, 2.0], [3.0, -4.0]]
    r = repr(x)
    assert "device='tpu:0'" in r and "1.5000" in r and "-4.0000" in r
    assert str(torch.zeros(0, device="tpu")) == "tensor([], device='tpu:0')"


def test_print_large_tensor_is_summarized_like_cpu():
    torch.manual_seed(0)
    cpu = torch.randn(300, 400)
    t = cpu.to("tpu")
    got = repr(t)
    assert "..." in got and got.endswith("device='tpu:0')")

    def values(text):  # the printed numbers, without the device suffix
        return text.split("device=")[0].rstrip(",\n ").removesuffix(")")

    assert values(got) == values(repr(cpu))
    c3 = torch.arange(5 * 1000 * 3, dtype=torch.float32).reshape(5, 1000, 3)
    assert values(repr(c3.to("tpu"))) == values(repr(c3))


def test_views_share_storage():
    x = torch.arange(12.0).reshape(3, 4).to("tpu")
    v = x[1:]
    assert v._base is x
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert v.storage_offset() == 4
    t = x.t()
    assert t.stride() == (1, 4) and t._base is x
    assert x.permute(1, 0).shape == (4, 3)
    e = x[:1].expand(5, 4)
    assert e.stride() == (0, 1)
    assert torch.equal(e.cpu(), torch.arange(4.0).expand(5, 4))
    assert torch.equal(x.reshape(2, 6).cpu(), torch.arange(12.0).reshape(2, 6))
    c = x.t().contiguous()
    assert c.is_contiguous() and torch.equal(c.cpu(), torch.arange(12.0).reshape(3, 4).t())
    assert torch.equal(x.t().reshape(-1).cpu(), torch.arange(12.0).reshape(3, 4).t().reshape(-1))


def test_inplace_through_view_changes_base_and_bumps_version():
    x = torch.zeros(3, 4, device="tpu")
    v0 = x._version
    x[1].add_(5.0)
    x[:, 2].fill_(7.0)
    assert x._version > v0
    ref = torch.zeros(3, 4)
    ref[1] += 5
    ref[:, 2] = 7
    assert torch.equal(x.cpu(), ref)
    y = torch.ones(4, 3, device="tpu")
    y.t().mul_(3.0)
    assert torch.equal(y.cpu(), torch.full((4, 3), 3.0))


def test_copy_between_devices():
    src = torch.arange(6.0).reshape(2, 3)
    t = torch.empty(2, 3, device="tpu")
    t.copy_(src)                          # cpu -> tpu
    back = torch.empty(2, 3)
    back.copy_(t)                         # tpu -> cpu
    assert torch.equal(back, src)
    u = torch.empty(2, 3, device="tpu")
    u.copy_(t)                            # tpu -> tpu
    assert torch.equal(u.cpu(), src)
    w = torch.empty(3, 2, device="tpu")
    w.copy_(t.t())                        # strided source
    assert torch.equal(w.cpu(), src.t())
    h = torch.empty(2, 3, dtype=torch.int32, device="tpu")
    h.copy_(src)                          # with dtype conversion
    assert torch.equal(h.cpu(), src.int())
    bcast = torch.empty(4, 3, device="tpu")
    bcast.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(bcast.cpu(), torch.tensor([1.0, 2.0, 3.0]).expand(4, 3))
    ht = torch.empty(2, 3, dtype=torch.float64)
    ht.copy_(t)                           # tpu f32 -> cpu f64
    assert torch.equal(ht, src.double())


def test_host_source_is_snapshotted():
    src = torch.ones(1000)
    t = torch.empty(1000, device="tpu")
    for _ in range(3):
        t = t * 1.0                       # queue work that uses t
    t.copy_(src)
    src.fill_(5.0)                        # overwrite the host buffer at once
    assert t.cpu().sum().item() == 1000.0


def test_zero_dim_cpu_operand_and_mixed_device_error():
    x = torch.arange(4.0).to("tpu")
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.arange(4.0) * 2)
    assert torch.equal((torch.tensor(3.0) + x).cpu(), torch.arange(4.0) + 3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        x + torch.ones(4)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(4) * x


def test_shape_mismatch_is_pytorch_error_and_next_op_works():
    a = torch.ones(3, 4, device="tpu")
    b = torch.ones(5, 4, device="tpu")
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(3\) must match the size of tensor b \(5\)"):
        a + b
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        a @ b
    assert (a + a).sum().item() == 24


def test_dtype_promotion_matches_cpu():
    i = torch.arange(4, dtype=torch.int32)
    f = torch.ones(4, dtype=torch.bfloat16)
    for a, b in [(i, f), (i, 2.5), (f, 3), (i, 2), (i, True)]:
        ta = a.to("tpu")
        tb = b.to("tpu") if isinstance(b, torch.Tensor) else b
        got, want = (ta + tb).cpu(), a + b
        assert got.dtype == want.dtype and torch.equal(got, want), (a.dtype, b)
    assert (torch.arange(4).to("tpu") / 2).dtype == torch.float32


def test_scalar_values_are_runtime_operands():
    x = torch.arange(4.0).to("tpu")
    outs = [(x * s).cpu() for s in (1.5, 2.5, -3.0)]
    assert [o[3].item() for o in outs] == [4.5, 7.5, -9.0]
    outs = [torch.add(x, x, alpha=a).cpu()[1].item() for a in (2.0, 3.0)]
    assert outs == [3.0, 4.0]


@pytest.mark.parametrize("shape,dim", [((300, 200), 0), ((300, 200), 1), ((7, 130, 9), (0, 2)),
                                       ((70, 3, 80), 1), ((1 << 20,), 0), ((5, 6, 7), None)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_over_dims_matches_cpu(shape, dim, keepdim):
    torch.manual_seed(0)
    x = torch.randn(shape)
    t = x.to("tpu")
    got = t.sum(dim, keepdim=keepdim) if dim is not None else t.sum()
    want = x.sum(dim, keepdim=keepdim) if dim is not None else x.sum()
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-4)
    ti = (x * 10).int().to("tpu")
    gi = ti.sum(dim, keepdim=keepdim) if dim is not None else ti.sum()
    wi = (x * 10).int().sum(dim, keepdim=keepdim) if dim is not None else (x * 10).int().sum()
    assert gi.dtype == torch.int64 and torch.equal(gi.cpu(), wi)


def test_out_variants_resize_like_pytorch():
    a = torch.ones(3, 4, device="tpu")
    out = torch.empty(0, device="tpu")
    torch.add(a, a, out=out)
    assert out.shape == (3, 4) and out.sum().item() == 24.0
    out = torch.empty(5, device="tpu")
    with pytest.warns(UserWarning, match="was resized"):
        torch.mul(a, 2, out=out)
    assert out.shape == (3, 4)
    s = torch.empty(7, device="tpu")
    torch.sum(a, dim=1, out=s)
    assert s.tolist() == [4.0, 4.0, 4.0]


def test_error_site_names_user_code_not_torchtpu():
    x = torch.randn(4, 6, device="tpu")
    bad = torch.full((4, 3), 9, device="tpu", dtype=torch.int64)
    y = torch.gather(x, 1, bad)
    with pytest.raises(IndexError) as e:
        y.sum().item()
    assert "test_tensor.py" in str(e.value)
    assert "/torchtpu/" not in str(e.value).split("enqueued at")[1].split(";")[0]


def test_bool_arithmetic_and_wrapped_numbers_like_cpu():
    b = torch.tensor([True, False, True])
    tb = b.to("tpu")
    assert torch.equal((tb * tb).cpu(), b * b)
    assert torch.equal((tb + tb).cpu(), b + b)
    i = torch.arange(3, dtype=torch.int32)
    got = torch.where(tb, i.to("tpu"), 0.5).cpu()
    want = torch.where(b, i, 0.5)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_copy_from_an_efficient_zero_tensor():
    x = torch.full((3,), 7.0, device="tpu")
    x.copy_(torch._efficientzerotensor(3))
    assert x.tolist() == [0.0, 0.0, 0.0]
